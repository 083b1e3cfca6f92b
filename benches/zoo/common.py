"""Helpers shared by the zoo's steps: case names, JSON files, error comparison, subprocesses."""

import json
import os
import signal
import subprocess
import time

import numpy as np

# The exporters and shape kinds a case combines; see cases_for().
EXPORTERS = ("dynamo", "legacy")
SHAPE_KINDS = ("dynamic", "static")
FP32_TOL = 1e-4
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


def read_json(path, default=None):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return default


def write_json(path, obj):
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w") as f:
        json.dump(obj, f, indent=1, sort_keys=True, default=_jsonable)
    os.replace(tmp, path)


def _jsonable(x):
    if isinstance(x, (np.integer,)):
        return int(x)
    if isinstance(x, (np.floating,)):
        return float(x)
    if isinstance(x, np.ndarray):
        return x.tolist()
    return str(x)


def compare(actual, reference):
    """Errors of one output: relative L2 (||a-r|| / ||r||), max abs, and why it cannot be compared."""
    r = np.asarray(reference)
    a = np.asarray(actual)
    out = {"shape": list(r.shape), "dtype": str(r.dtype)}
    if tuple(a.shape) != tuple(r.shape):
        out["error"] = f"shape {list(a.shape)} != expected {list(r.shape)}"
        return out
    if r.dtype.kind in "biu" or r.dtype == np.bool_:
        mismatched = int(np.count_nonzero(a.astype(np.int64) != r.astype(np.int64)))
        out.update(rel_l2=0.0 if mismatched == 0 else 1.0, max_abs=float(mismatched), exact=True)
        if mismatched:
            out["error"] = f"{mismatched} integer elements differ"
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
    """Worst relative L2 / max abs over every expected output; `error` names the first missing or
    malformed output."""
    per, worst_rel, worst_abs, error = {}, 0.0, 0.0, None
    for key in expected.files:
        if key not in actual:
            per[key] = {"error": "missing"}
            error = error or f"output `{key}` missing from kiln's outputs (has {sorted(actual)})"
            continue
        c = compare(actual[key], expected[key])
        per[key] = c
        if "error" in c and error is None:
            error = f"output `{key}`: {c['error']}"
        worst_rel = max(worst_rel, c.get("rel_l2", float("inf")))
        worst_abs = max(worst_abs, c.get("max_abs", float("inf")))
    return {"rel_l2": worst_rel, "max_abs": worst_abs, "outputs": per, "compare_error": error}


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
