"""The run step's jobs: kiln on one case at one backend and precision, and onnxruntime on one case.

kiln runs with the output root as its working directory and the model given relative to it, so the
dynamo exporter's external data (model.onnx.data) must be found beside the model, not in the cwd.
"""

import os
import re
import time

import numpy as np

import common

LAYERS_RE = re.compile(r"layers:\s+(\d+) before passes, (\d+) in the engine")
TIME_RE = re.compile(r"^(import|build|run):\s+(.*)$", re.M)


def kiln_env(precision):
    env = dict(os.environ)
    # The GPU machine's CUDA libraries, as benches/gpu/run.sh sets them (absent paths are left out).
    nv = "/opt/torch/.venv/lib/python3.12/site-packages/nvidia"
    libs = [p for p in ("/usr/local/nvidia/lib64", f"{nv}/cu13/lib", f"{nv}/cudnn/lib", "/usr/local/cuda/lib64")
            if os.path.isdir(p)]
    if libs:
        env["LD_LIBRARY_PATH"] = ":".join(libs + [env.get("LD_LIBRARY_PATH", "")]).rstrip(":")
    if os.path.isdir("/usr/local/cuda/include"):
        env.setdefault("KILN_CUDA_INCLUDE", "/usr/local/cuda/include")
    env.setdefault("MATMUL_NUM_THREADS", "1")
    return env


def symbolic_inputs(meta):
    """{input name: (actual dims, indices of symbolic dims)} for inputs with symbolic dims."""
    out = {}
    with np.load(os.path.join(meta["_dir"], "inputs.npz")) as f:
        actual = {k: list(f[k].shape) for k in f.files}
    for i in meta["onnx_inputs"]:
        sym = [k for k, d in enumerate(i["dims"]) if isinstance(d, str)]
        if sym and i["name"] in actual:
            out[i["name"]] = (actual[i["name"]], sym)
    return out


def _shape_text(dims_by_name):
    return ",".join(f"{n}:{'x'.join(str(d) for d in dims)}" for n, dims in dims_by_name.items())


def profile_args(meta):
    """--min/--opt/--max-shapes for the symbolic dims: batch 1..4 (opt: the test's own dims)."""
    sym = symbolic_inputs(meta)
    if not sym:
        return []
    lo, hi, opt = {}, {}, {}
    for name, (dims, idx) in sym.items():
        opt[name] = dims
        lo[name] = [1 if (k in idx and k == 0) else d for k, d in enumerate(dims)]
        hi[name] = [max(d, 4) if (k in idx and k == 0) else d for k, d in enumerate(dims)]
    return ["--min-shapes", _shape_text(lo), "--opt-shapes", _shape_text(opt), "--max-shapes", _shape_text(hi)]


def _stage(error):
    if error.startswith("cannot import ONNX model") or "cannot read model file" in error:
        return "import"
    if error.startswith("cannot build") or "cannot build an engine" in error:
        return "build"
    return "run"


def _layers(stdout):
    m = LAYERS_RE.search(stdout or "")
    return (int(m.group(1)), int(m.group(2))) if m else (None, None)


def fp16_tolerances(case_dir, expected):
    """Per output: max(3 x PyTorch fp16's own rel L2, 1e-3) where torch_fp16.npz exists, else 1e-2."""
    path = os.path.join(case_dir, "torch_fp16.npz")
    if not os.path.exists(path):
        return {k: common.FP16_NO_REFERENCE_TOL for k in expected.files}, False
    with np.load(path) as t16:
        tol = {}
        for k in expected.files:
            c = common.compare(t16[k], expected[k]) if k in t16.files else {}
            own = c.get("rel_l2")
            if own is None or not np.isfinite(own):  # PyTorch fp16 overflowed: no usable reference
                tol[k] = common.FP16_NO_REFERENCE_TOL
            else:
                tol[k] = max(3 * own, common.FP16_FLOOR)
        return tol, True


def kiln_job(root, case, backend, precision, kiln, timeout):
    """Runs kiln on one case; returns the result dict (None: cut short by the deadline, not recorded)."""
    case_dir = os.path.join(root, case)
    meta = common.read_json(os.path.join(case_dir, "meta.json"))
    meta["_dir"] = case_dir
    env = kiln_env(precision)
    tag = f"{backend}_{precision}"
    log = os.path.join(case_dir, f"kiln_{tag}.log")
    if os.path.exists(log):
        os.remove(log)
    model, inputs = f"{case}/model.onnx", f"{case}/inputs.npz"
    out_npz = f"{case}/out_{tag}.npz"
    res = {"case": case, "backend": backend, "precision": precision, "kiln": kiln, "started": time.time()}
    sym = symbolic_inputs(meta)
    shapes = ["--shapes", _shape_text({n: d for n, (d, _) in sym.items()})] if sym else []
    start = time.perf_counter()
    # Every job builds an engine file and runs it: the build prints the layer counts, and
    # fp32 means no TF32 (kiln's builder allows TF32 by default, as TensorRT's does).
    engine = f"{case}/tmp_{tag}.engine"
    flags = ["--no-tf32"] if precision == "fp32" else ["--flag", precision]
    cmd = [kiln, "build", model, "-o", engine, "--backend", backend] + flags + profile_args(meta)
    code, out, err, secs = common.run_process(cmd, timeout, cwd=root, env=env, log=log)
    res["layers_before"], res["layers_after"] = _layers(out)
    res["build_seconds"] = secs
    if code != 0:
        _remove(os.path.join(root, engine))
        return _kiln_failed(res, code, err, timeout, start, default_stage="build")
    cmd = [kiln, "run", engine, "--backend", backend, "--inputs", inputs, "--save-outputs", out_npz] + shapes
    code, out, err, secs = common.run_process(cmd, max(timeout - (time.perf_counter() - start), 1), cwd=root,
                                              env=env, log=log)
    _remove(os.path.join(root, engine))
    res["times"] = dict(TIME_RE.findall(out or ""))
    if code != 0:
        res = _kiln_failed(res, code, err, timeout, start)
    else:
        res["import_ok"] = True
        with np.load(os.path.join(root, out_npz)) as actual, np.load(os.path.join(case_dir, "expected.npz")) as exp:
            cmp = common.compare_all(actual, exp)
            if precision == "fp32":
                tol = {k: meta.get("fp32_tol", common.FP32_TOL) for k in exp.files}
                res["tolerance_source"] = "fp32"
            else:
                tol, has_ref = fp16_tolerances(case_dir, exp)
                res["tolerance_source"] = "3x torch fp16" if has_ref else "no torch fp16 reference: 1e-2"
        res.update(cmp)
        res["tolerance"] = max(tol.values()) if tol else None
        over = [k for k, c in cmp["outputs"].items() if c.get("rel_l2", float("inf")) > tol[k]]
        ok = cmp["compare_error"] is None and not over
        res["status"] = "pass" if ok else "fail"
        if not ok:
            res["error"] = cmp["compare_error"] or (
                f"rel L2 {cmp['rel_l2']:.4g} > tolerance {max(tol[k] for k in over):.4g} ({', '.join(over[:3])})")
    res["seconds"] = time.perf_counter() - start
    return res


def _kiln_failed(res, code, err, timeout, start, default_stage=None):
    if code is None:
        res.update(status="timeout", error=f"timeout after {timeout:.0f} s", import_ok=None, stage="timeout")
    else:
        error = common.first_error_line(err, code)
        stage = _stage(error)
        if default_stage == "build" and stage == "run":
            stage = "build"
        res.update(status="error", error=error, exit_code=code, stage=stage, import_ok=stage != "import")
    res["seconds"] = time.perf_counter() - start
    return res


def _remove(path):
    try:
        os.remove(path)
    except OSError:
        pass


def ort_one(root, case):
    """onnxruntime (CPU) on one case, in its own process: tells kiln's mismatches from the export's."""
    import onnxruntime as ort

    case_dir = os.path.join(root, case)
    res = {"case": case, "onnxruntime": ort.__version__}
    start = time.perf_counter()
    try:
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = 1
        opts.inter_op_num_threads = 1
        sess = ort.InferenceSession(os.path.join(case_dir, "model.onnx"), opts, providers=["CPUExecutionProvider"])
        with np.load(os.path.join(case_dir, "inputs.npz")) as f:
            feed = {k: f[k] for k in f.files}
        names = [o.name for o in sess.get_outputs()]
        outs = dict(zip(names, sess.run(None, feed)))
        with np.load(os.path.join(case_dir, "expected.npz")) as exp:
            cmp = common.compare_all(outs, exp)
        res.update(cmp)
        res["status"] = "ok" if cmp["compare_error"] is None else "mismatch"
        if cmp["compare_error"]:
            res["error"] = cmp["compare_error"]
    except Exception as e:
        lines = [ln for ln in str(e).splitlines() if ln.strip()]
        res.update(status="error", error=f"{type(e).__name__}: {lines[0] if lines else ''}"[:300])
    res["seconds"] = time.perf_counter() - start
    common.write_json(os.path.join(case_dir, "ort.json"), res)
    return res
