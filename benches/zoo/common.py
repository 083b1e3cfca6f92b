"""Helpers shared by the zoo's steps: case names, JSON files, error comparison, subprocesses."""

import os
import signal
import subprocess
import time
import zlib

import numpy as np

from jsonio import read_json, write_json  # noqa: F401  (re-exported: the zoo's scripts call common.*)

# The exporters and shape kinds a case combines; see cases_for().
EXPORTERS = ("dynamo", "legacy")
SHAPE_KINDS = ("dynamic", "static")
FP32_TOL = 1e-4
# Where expected_fp64.npz exists, a job may be this many times as far from PyTorch fp64 as PyTorch
# itself (fp32, or fp16 on CUDA) is: random-weight deep nets are ill-conditioned, and an fp32 engine
# that rounds differently from PyTorch lands about as far off as PyTorch does.
OWN_ERROR_FACTOR = 3
FP16_FLOOR = 1e-3
# Without a PyTorch fp16 reference (no CUDA at export time, or PyTorch failed in fp16).
FP16_NO_REFERENCE_TOL = 1e-2
STATIC_BATCH = 1
DYNAMIC_BATCH = 2


def case_name(model, exporter, kind):
    return f"{model}__{exporter}-{kind}"


def split_case(name):
    model, rest = name.split("__", 1)
    exporter, kind = rest.split("-", 1)
    return model, exporter, kind


def cases_for(index, spec, exporters):
    """The (exporter, shape kind) pairs of the model at `index` in the registry: dynamo with a dynamic
    batch and legacy with a static one for every model, the two other pairs for every 4th model."""
    pairs = [("dynamo", "dynamic"), ("legacy", "static")]
    if index % 4 == 0:
        pairs += [("dynamo", "static"), ("legacy", "dynamic")]
    if not spec.dynamic_ok:
        pairs = [(e, "static") for e in EXPORTERS]
    return [(e, k) for e, k in pairs if e in exporters]


def load_npz(path):
    """{name: array} of an .npz file, read whole (the file is closed again)."""
    with np.load(path) as f:
        return {k: f[k] for k in f.files}


def is_integer(array):
    return np.asarray(array).dtype.kind in "biu"


def output_error(c):
    """The judged error of one compare() result: the fraction of differing elements for integer
    outputs, rel L2 for float ones; None where it cannot be compared (missing, shape, non-finite)."""
    if "error" in c:
        return None
    return c["mismatch_fraction"] if "mismatch_fraction" in c else c.get("rel_l2")


def compare(actual, reference):
    """Errors of one output: relative L2 (||a-r|| / ||r||), max abs, and why it cannot be compared."""
    r = np.asarray(reference)
    a = np.asarray(actual)
    out = {"shape": list(r.shape), "dtype": str(r.dtype)}
    if tuple(a.shape) != tuple(r.shape):
        out["error"] = f"shape {list(a.shape)} != expected {list(r.shape)}"
        return out
    if is_integer(r):  # judged by the fraction of differing elements (judge()), not rel L2
        mismatched = int(np.count_nonzero(a.astype(np.int64) != r.astype(np.int64)))
        out.update(rel_l2=0.0 if mismatched == 0 else 1.0, max_abs=float(mismatched), exact=True,
                   mismatch_fraction=mismatched / max(r.size, 1))
        return out
    a64, r64 = a.astype(np.float64), r.astype(np.float64)
    if not np.isfinite(a64).all() and np.isfinite(r64).all():
        out["error"] = f"{int(np.count_nonzero(~np.isfinite(a64)))} non-finite values"
        out.update(rel_l2=float("inf"), max_abs=float("inf"))
        return out
    finite = np.isfinite(r64) & np.isfinite(a64)
    diff = np.where(finite, a64 - r64, 0.0)
    norm = np.linalg.norm(np.where(finite, r64, 0.0))
    out["rel_l2"] = float(np.linalg.norm(diff) / max(norm, 1e-30))
    out["max_abs"] = float(np.abs(diff).max()) if diff.size else 0.0
    return out


def compare_all(actual, expected):
    """actual, expected: {output: array}. Worst relative L2 / max abs over every expected output;
    `compare_error` names the first missing or malformed output (integer outputs that differ are
    not an error here: see judge())."""
    per, worst_rel, worst_abs, error = {}, 0.0, 0.0, None
    for key in expected:
        if key not in actual:
            per[key] = {"error": "missing"}
            error = error or f"output `{key}` missing (has {sorted(actual)})"
            continue
        c = compare(actual[key], expected[key])
        per[key] = c
        if "error" in c and error is None:
            error = f"output `{key}`: {c['error']}"
        worst_rel = max(worst_rel, c.get("rel_l2", float("inf")))
        worst_abs = max(worst_abs, c.get("max_abs", float("inf")))
    return {"rel_l2": worst_rel, "max_abs": worst_abs, "outputs": per, "compare_error": error}


def tolerance(reference, own, floor, unknown):
    """One output's tolerance from its PyTorch counterpart's own error vs the same reference:
    max(floor, 3 x own) for float outputs, 3 x own (a fraction of elements) for integer ones.
    Without a usable own error: `unknown` for float outputs, exact match for integer ones."""
    if own is None or not np.isfinite(own):
        return 0.0 if is_integer(reference) else unknown
    return OWN_ERROR_FACTOR * own if is_integer(reference) else max(floor, OWN_ERROR_FACTOR * own)


def judge(actual, plan):
    """actual: {output: array}; plan: {output: (reference array, reference label, tolerance)}.
    Returns per output {reference, error, tolerance, pass} (error: see output_error), the worst
    output (highest error / tolerance), whether all pass, and the first failure's message."""
    judged, worst, message = {}, None, None
    for name, (ref, label, tol) in plan.items():
        c = compare(actual[name], ref) if name in actual else {"error": f"missing (has {sorted(actual)})"}
        err = output_error(c)
        ok = err is not None and err <= tol
        judged[name] = {"reference": label, "error": err, "tolerance": tol, "pass": ok}
        if "error" in c:
            judged[name]["compare_error"] = c["error"]
        ratio = float("inf") if err is None else (err / tol if tol > 0 else (0.0 if err == 0 else float("inf")))
        if worst is None or ratio > worst[0]:
            worst = (ratio, name)
        if not ok and message is None:
            metric = "differing fraction" if is_integer(ref) else "rel L2"
            message = (f"output `{name}`: {c['error']}" if err is None else
                       f"{metric} {err:.4g} vs {label} > tolerance {tol:.4g} (`{name}`)")
    w = judged[worst[1]] if worst else {}
    return {"judged": judged, "worst": dict(w, output=worst[1]) if worst else None,
            "pass": bool(judged) and all(j["pass"] for j in judged.values()), "judge_error": message}


def sci(x, short=False):
    """1.2e-05; with `short`, a round mantissa loses its `.0` (1e-04: tolerances mostly are)."""
    if x is None:
        return "-"
    if x == float("inf"):
        return "inf"
    return f"{x:.1e}".replace(".0e", "e") if short else f"{x:.1e}"


def verdict(res):
    """`error ≤ tolerance` (or `>`) of a judged result's worst output; `vs fp32` where that output
    was judged against PyTorch fp32 rather than fp64. None for results without a verdict."""
    w = res.get("worst")
    if not w:
        return None
    if w.get("error") is None:
        return f"{w.get('output')}: {w.get('compare_error', 'not comparable')}"
    text = f"{sci(w['error'])} {'≤' if w['pass'] else '>'} {sci(w['tolerance'], short=True)}"
    return text + (" vs fp32" if w.get("reference") == "fp32" else "")


def on_one_gpu(key, env=None):
    """`env` (default: this process's) with CUDA_VISIBLE_DEVICES set to one of ZOO_GPUS devices,
    chosen by `key` (a case name), so that many jobs spread over a machine's GPUs; unchanged
    when ZOO_GPUS is unset or 1."""
    env = dict(os.environ if env is None else env)
    gpus = int(os.environ.get("ZOO_GPUS", "1") or 1)
    if gpus > 1:
        env["CUDA_VISIBLE_DEVICES"] = str(zlib.crc32(key.encode()) % gpus)
    return env


def run_process(cmd, timeout, cwd=None, env=None, log=None):
    """Runs cmd in its own process group; on timeout kills that group. Returns
    (returncode or None on timeout, stdout, stderr, seconds)."""
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            errors="replace", start_new_session=True)
    try:
        out, err = proc.communicate(timeout=max(timeout, 1))
        code = proc.returncode
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        out, err = proc.communicate()
        code = None
    seconds = time.perf_counter() - start
    if log is not None:
        with open(log, "a") as f:
            f.write(f"$ {' '.join(cmd)}\n[exit {code}, {seconds:.1f} s]\n{out}\n{err}\n")
    return code, out, err, seconds


def first_error_line(stderr, code):
    """kiln's one `error: ...` line (the table's first error message), else the last stderr line."""
    lines = [ln.strip() for ln in (stderr or "").splitlines() if ln.strip()]
    for ln in lines:
        if ln.startswith("error:"):
            return ln[len("error:"):].strip()
    if lines:
        return f"exit {code}: {lines[-1]}"
    return f"exit {code} with no message"


class Deadline:
    """The whole invocation's time budget (--budget): a job is not started, or is cut short and left
    unrecorded (so the next invocation redoes it), when the budget runs out."""

    def __init__(self, seconds):
        self.end = time.monotonic() + seconds if seconds else None

    def left(self):
        return float("inf") if self.end is None else self.end - time.monotonic()

    def timeout(self, per_job):
        """The job's time limit, or None when too little of the budget is left to start it."""
        left = self.left()
        return None if left <= 5 else min(per_job, left)
