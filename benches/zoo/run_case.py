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


def _fp64(case_dir):
    path = os.path.join(case_dir, "expected_fp64.npz")
    return common.load_npz(path) if os.path.exists(path) else None


def fp32_plan(case_dir, meta, exp32):
    """{output: (reference, label, tolerance)} for an fp32 job (kiln or onnxruntime), the rule's
    name, and the fp64 reference (None without one). With expected_fp64.npz: vs fp64, tolerance
    max(floor, 3 x PyTorch fp32's own error vs fp64), the floor being 1e-4 or the registry's
    fp32_tol; else (or for an output PyTorch fp32 and fp64 cannot be compared on) vs fp32 ≤ floor."""
    floor = meta.get("fp32_tol") or common.FP32_TOL
    exp64, own = _fp64(case_dir), meta.get("torch_fp32_error")
    plan = {}
    for k, r in exp32.items():
        if exp64 is not None and own is not None and own.get(k) is not None and k in exp64:
            plan[k] = (exp64[k], "fp64", common.tolerance(exp64[k], own[k], floor, floor))
        else:
            plan[k] = (r, "fp32", common.tolerance(r, None, floor, floor))
    uses_fp64 = any(label == "fp64" for _, label, _ in plan.values())
    source = "3x torch fp32 vs fp64" if uses_fp64 else "fp32 1e-4"
    if floor != common.FP32_TOL:
        source += f" (model floor {floor:g})"
    return plan, source, exp64


def fp16_plan(case_dir, exp32):
    """As fp32_plan for fp16 jobs: vs fp64 where it exists (else fp32), tolerance max(1e-3, 3 x
    PyTorch fp16's own error vs that same reference) from torch_fp16.npz; 1e-2 without PyTorch fp16
    (no CUDA at export) or where it overflowed. Also returns PyTorch fp16's own errors."""
    exp64 = _fp64(case_dir)
    ref, label = (exp64, "fp64") if exp64 is not None else (exp32, "fp32")
    path = os.path.join(case_dir, "torch_fp16.npz")
    t16 = common.load_npz(path) if os.path.exists(path) else None
    own = {k: common.output_error(common.compare(t16[k], r)) if k in t16 else None
           for k, r in ref.items()} if t16 is not None else {}
    plan = {k: (r, label, common.tolerance(r, own.get(k), common.FP16_FLOOR, common.FP16_NO_REFERENCE_TOL))
            for k, r in ref.items()}
    source = f"3x torch fp16 vs {label}" if t16 is not None else "no torch fp16 reference: 1e-2"
    return plan, source, exp64, own


def judge_outputs(case_dir, meta, precision, actual):
    """The result fields of one job's outputs: vs PyTorch fp32 as always (rel_l2, max_abs, outputs),
    vs fp64 where it exists (vs_fp64), and the verdict of the rule (judged, worst, pass, tolerance)."""
    exp32 = common.load_npz(os.path.join(case_dir, "expected.npz"))
    res = common.compare_all(actual, exp32)
    if precision != "fp32":
        plan, source, exp64, own16 = fp16_plan(case_dir, exp32)
        res["torch_fp16_error"] = own16
    else:
        plan, source, exp64 = fp32_plan(case_dir, meta, exp32)
    if exp64 is not None:
        res["vs_fp64"] = common.compare_all(actual, exp64)
    res.update(common.judge(actual, plan), tolerance={k: t for k, (_, _, t) in plan.items()},
               tolerance_source=source)
    return res


def kiln_job(root, case, backend, precision, kiln, timeout):
    """Runs kiln on one case; returns the result dict (None: cut short by the deadline, not recorded)."""
    case_dir = os.path.join(root, case)
    meta = common.read_json(os.path.join(case_dir, "meta.json"))
    meta["_dir"] = case_dir
    env = common.on_one_gpu(f"{case}/{backend}/{precision}", kiln_env(precision))
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
        res.update(judge_outputs(case_dir, meta, precision, common.load_npz(os.path.join(root, out_npz))))
        res["status"] = "pass" if res["pass"] else "fail"
        if not res["pass"]:
            res["error"] = res["judge_error"]
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
    """onnxruntime (CPU) on one case, in its own process: tells kiln's mismatches from the export's.
    status: ok (ran, every output comparable) / mismatch / error; pass: the fp32 rule, as for kiln."""
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
        meta = common.read_json(os.path.join(case_dir, "meta.json"), {})
        res.update(judge_outputs(case_dir, meta, "fp32", outs))  # the rule kiln's fp32 jobs meet
        res["status"] = "ok" if res["compare_error"] is None else "mismatch"
        if not res["pass"]:
            res["error"] = res["compare_error"] or res["judge_error"]
    except Exception as e:
        lines = [ln for ln in str(e).splitlines() if ln.strip()]
        res.update(status="error", error=f"{type(e).__name__}: {lines[0] if lines else ''}"[:300])
    res["seconds"] = time.perf_counter() - start
    common.write_json(os.path.join(case_dir, "ort.json"), res)
    return res
