"""One export case, in its own process: build the model, compute PyTorch's answers, export to ONNX.

Writes into DIR/<case>/: model.onnx (+ model.onnx.data for the dynamo exporter), inputs.npz and
expected.npz keyed by the ONNX graph's own input and output names, expected_fp64.npz (PyTorch in
float64, the reference for the pass rule), torch_fp16.npz (PyTorch's fp16 outputs on CUDA, where
there is CUDA) and meta.json, last: a case is done when meta.json exists.
"""

import copy
import os
import re
import shutil
import time
import traceback

import numpy as np

import common
import registry


def _flatten(out):
    import torch

    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, dict):
        out = list(out.values())
    if hasattr(out, "to_tuple"):
        out = out.to_tuple()
    flat = []
    for o in out:
        flat.extend(_flatten(o))
    return flat


def reference_fp64(module, inputs):
    """PyTorch's outputs in float64 (a deep copy; float inputs cast, integer ones as they are). Deep
    models with random weights can be ill-conditioned: PyTorch fp32 itself is then far from the exact
    answer, so kiln is judged against this and against PyTorch fp32's own error. Tensors created in
    forward without a dtype are float64 meanwhile, so that they do not clash with the weights."""
    import torch

    m64 = copy.deepcopy(module).double()
    x64 = [x.double() if x.is_floating_point() else x for x in inputs]
    default = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        with torch.no_grad():
            return [o.detach().numpy() for o in _flatten(m64(*x64))]
    finally:
        torch.set_default_dtype(default)


def redraw(module, seed=1):
    """Zero-initialised parameters (ViT heads, LayerScale, GRN, zero biases) get small random normals,
    so that no part of the graph is degenerate. Returns their names."""
    import torch

    g = torch.Generator().manual_seed(seed)
    names = []
    with torch.no_grad():
        for name, p in module.named_parameters():
            if p.is_floating_point() and p.numel() and not p.is_meta and not torch.any(p):
                p.copy_(torch.randn(p.shape, generator=g) * 0.02)
                names.append(name)
    return names


def calibrate_batchnorm(module, inputs, seed=2):
    """Gives BatchNorm real running statistics: one train-mode pass (cumulative averages) on a fixed
    batch of 4 drawn like the example inputs, so eval-mode activations stay well scaled (a random
    init with mean 0 / var 1 statistics lets deep nets such as Inception blow up to 1e13, which fp16
    cannot hold). Falls back to random statistics when that pass fails. Returns how it went."""
    import torch

    bns = [m for m in module.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)
           and m.track_running_stats and m.running_mean is not None]
    if not bns:
        return None
    g = torch.Generator().manual_seed(seed)
    calib = []
    for x in inputs:
        if x.is_floating_point():
            calib.append(torch.randn((4,) + tuple(x.shape[1:]), generator=g) * x.std() + x.mean())
        else:
            calib.append(x[:1].expand((4,) + tuple(x.shape[1:])).clone())
    saved = [m.momentum for m in bns]
    try:
        with torch.no_grad():
            for m in bns:
                m.reset_running_stats()
                m.momentum = None
            module.train()
            try:
                module(*calib)
                how = "calibrated"
            except Exception:  # detection models want targets in train mode: calibrate the backbone
                backbone = next((m for n, m in module.named_modules() if n.endswith("backbone")), None)
                if backbone is None:
                    raise
                backbone(calib[0])
                how = "calibrated (backbone)"
    except Exception as e:
        with torch.no_grad():
            for m in bns:
                m.running_mean.copy_(torch.randn(m.running_mean.shape, generator=g) * 0.1)
                m.running_var.copy_(torch.rand(m.running_var.shape, generator=g) + 0.5)
        how = f"random statistics (calibration failed: {_one_line(e)[:200]})"
    finally:
        for m, mom in zip(bns, saved):
            m.momentum = mom
        module.eval()
    return how


def _record_fp32_error(meta, ref, ref64):
    """meta's torch_fp32_error: per output, PyTorch fp32's own error vs float64 (rel L2; for integer
    outputs the fraction of differing elements): the scale of the fp32 tolerance. None where they
    cannot be compared (e.g. a detection model keeps another number of boxes), with the reason."""
    own = {}
    for name, r64 in ref64.items():
        c = common.compare(ref[name], r64)
        own[name] = common.output_error(c)
        if "error" in c:
            meta.setdefault("torch_fp32_vs_fp64_problems", {})[name] = c["error"]
    meta["torch_fp32_error"] = own
    lost = [n for n, r in ref64.items() if r.dtype.kind == "f" and r.dtype != np.float64]
    if lost:  # some op kept float32 (a hard-coded dtype): that output's reference is not fully fp64
        meta["fp64_outputs_not_float64"] = lost


def count_params(spec):
    """Parameters of the model, built on the meta device where that works (no memory, fast)."""
    import torch

    try:
        with torch.device("meta"):
            case = spec.build(common.STATIC_BATCH)
        return sum(p.numel() for p in case.module.parameters())
    except Exception:
        return None


def _onnx_summary(path):
    import onnx

    model = onnx.load(path, load_external_data=False)
    hist = {}

    def walk(graph):
        n = 0
        for node in graph.node:
            n += 1
            key = node.op_type if node.domain in ("", "ai.onnx") else f"{node.domain}::{node.op_type}"
            hist[key] = hist.get(key, 0) + 1
            for attr in node.attribute:
                for g in list(attr.graphs) + ([attr.g] if attr.HasField("g") else []):
                    n += walk(g)
        return n

    nodes = walk(model.graph)

    def dims(vi):
        return [d.dim_param if d.dim_param else (d.dim_value if d.HasField("dim_value") else "?")
                for d in vi.type.tensor_type.shape.dim]

    elem = {v: k for k, v in onnx.TensorProto.DataType.items()}
    inputs = [{"name": vi.name, "dims": dims(vi), "dtype": elem.get(vi.type.tensor_type.elem_type, "?")}
              for vi in model.graph.input]
    outputs = [{"name": vi.name, "dims": dims(vi)} for vi in model.graph.output]
    opset = max((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), default=None)
    return {"onnx_opset": opset, "node_count": nodes, "op_histogram": dict(sorted(hist.items())),
            "onnx_inputs": inputs, "onnx_outputs": outputs, "onnx_functions": len(model.functions),
            "ir_version": model.ir_version}


def _export(case, exporter, dynamic, path, meta):
    import torch

    names, outs = list(case.input_names), list(case.output_names)
    if exporter == "legacy":
        torch.backends.mha.set_fastpath_enabled(False)
        axes = {k: v for k, v in case.dynamic_axes.items() if k in names + outs} if dynamic else None
        torch.onnx.export(case.module, tuple(case.inputs), path, dynamo=False, opset_version=17,
                          input_names=names, output_names=outs, dynamic_axes=axes)
        return
    torch.backends.mha.set_fastpath_enabled(False)
    kw = dict(dynamo=True, external_data=True, input_names=names, output_names=outs)
    if not dynamic:
        torch.onnx.export(case.module, tuple(case.inputs), path, **kw)
        return
    batch = torch.export.Dim("batch", min=1, max=1024)
    shapes = tuple({0: batch} if n in case.dynamic_axes else None for n in names)
    try:
        torch.onnx.export(case.module, tuple(case.inputs), path, dynamic_shapes=shapes, **kw)
    except Exception as e:  # the model pins its batch somewhere: let torch.export decide (may specialize)
        if not any(k in str(e) for k in ("Constraints violated", "specializ", "ConstraintViolation", "batch")):
            raise
        meta["dynamic_strict_error"] = _one_line(e)
        auto = tuple({0: torch.export.Dim.AUTO} if n in case.dynamic_axes else None for n in names)
        torch.onnx.export(case.module, tuple(case.inputs), path, dynamic_shapes=auto, **kw)
        meta["dynamic_fallback"] = "Dim.AUTO"


def _one_line(e):
    """`Type: first line`; for torch.onnx's wrapped errors, the cause from its exception summary."""
    text = re.sub(r"\x1b\[[0-9;]*m", "", str(e)).strip()
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    name = type(e).__name__
    if "## Exception summary" in lines:
        cause = lines[lines.index("## Exception summary") + 1:][:1]
        m = re.match(r"<class '(?:[\w.]+\.)?(\w+)'>: (.*)", cause[0]) if cause else None
        if m:
            name, lines = f"{name} <- {m.group(1)}", [m.group(2)]
    return f"{name}: {lines[0] if lines else ''}"[:300]


def _versions():
    import torch

    v = {"torch": torch.__version__}
    for mod in ("torchvision", "timm", "transformers", "onnx", "onnxscript"):
        try:
            v[mod] = __import__(mod).__version__
        except Exception:
            pass
    return v


def export_one(out_root, case_name, max_params, threads=1):
    import torch

    torch.set_num_threads(threads)
    model, exporter, kind = common.split_case(case_name)
    specs = {s.name: s for s in registry.all_specs()}
    spec = specs[model]
    case_dir = os.path.join(out_root, case_name)
    shutil.rmtree(case_dir, ignore_errors=True)
    os.makedirs(case_dir)
    dynamic = kind == "dynamic"
    batch = common.DYNAMIC_BATCH if dynamic else common.STATIC_BATCH
    meta = {"case": case_name, "model": model, "family": spec.family, "exporter": exporter, "shape_kind": kind,
            "batch": batch, "versions": _versions(), "max_params": max_params, "note": spec.note,
            "fp32_tol": spec.fp32_tol or common.FP32_TOL}
    if torch.cuda.is_available():
        meta["cuda_device"] = torch.cuda.get_device_name(0)

    def finish(status, **kw):
        meta.update(status=status, **kw)
        common.write_json(os.path.join(case_dir, "meta.json"), meta)
        return meta

    n = count_params(spec)
    if n is not None and max_params and n > max_params:
        return finish("skipped", param_count=n, error=f"{n / 1e6:.0f}M parameters > --max-params {max_params / 1e6:.0f}M")
    try:
        torch.manual_seed(0)
        case = spec.build(batch)
    except LookupError as e:
        return finish("skipped", error=str(e))
    except Exception as e:
        traceback.print_exc()
        return finish("export_failed", error=f"model construction failed: {_one_line(e)}")
    module = case.module.eval()
    meta["redrawn_params"] = redraw(module)
    meta["batchnorm"] = calibrate_batchnorm(module, case.inputs)
    meta["param_count"] = sum(p.numel() for p in module.parameters())
    if max_params and meta["param_count"] > max_params:
        return finish("skipped", error=f"{meta['param_count'] / 1e6:.0f}M parameters > --max-params "
                                        f"{max_params / 1e6:.0f}M")
    meta["input_shapes"] = {n: list(x.shape) for n, x in zip(case.input_names, case.inputs)}
    meta["input_dtypes"] = {n: str(x.dtype).replace("torch.", "") for n, x in zip(case.input_names, case.inputs)}
    if case.tolerance:
        meta["tolerance_note"] = case.tolerance.get("note")
        meta["fp32_tol"] = case.tolerance.get("fp32", meta["fp32_tol"])
    try:
        t = time.perf_counter()
        with torch.no_grad():
            ref = [o.detach().numpy() for o in _flatten(module(*case.inputs))]
        meta["torch_seconds"] = time.perf_counter() - t
    except Exception as e:
        traceback.print_exc()
        return finish("export_failed", error=f"PyTorch forward failed: {_one_line(e)}")
    rms = {}
    for i, r in enumerate(ref):
        rms[str(i)] = float(np.sqrt(np.mean(np.square(r.astype(np.float64))))) if r.size else 0.0
    meta["ref_rms"] = rms
    float_rms = [v for r, v in zip(ref, rms.values()) if r.dtype.kind == "f"]
    meta["min_ref_rms"] = min(float_rms) if float_rms else None
    meta["rms_ok"] = bool(float_rms) and min(float_rms) > 1e-6

    ref64 = None
    try:
        t = time.perf_counter()
        ref64 = reference_fp64(module, case.inputs)
        meta["torch_fp64_seconds"] = time.perf_counter() - t
        if len(ref64) != len(ref):
            raise ValueError(f"{len(ref64)} outputs in float64, {len(ref)} in float32")
    except Exception as e:  # the case still runs, judged against fp32 by the old rule
        traceback.print_exc()
        meta["torch_fp64_failed"] = _one_line(e)
        ref64 = None

    fp16 = None
    if torch.cuda.is_available():
        try:
            m16 = copy.deepcopy(module).cuda().half()
            with torch.no_grad():
                x16 = [x.cuda().half() if x.is_floating_point() else x.cuda() for x in case.inputs]
                fp16 = [o.detach().float().cpu().numpy() if o.is_floating_point() else o.cpu().numpy()
                        for o in _flatten(m16(*x16))]
            del m16
            torch.cuda.empty_cache()
            meta["torch_fp16_rel_l2"] = max(common.compare(a, r).get("rel_l2", float("inf"))
                                            for a, r in zip(fp16, ref) if r.dtype.kind == "f")
        except Exception as e:
            meta["torch_fp16_failed"] = _one_line(e)
            fp16 = None

    path = os.path.join(case_dir, "model.onnx")
    t = time.perf_counter()
    try:
        _export(case, exporter, dynamic, path, meta)
    except Exception as e:
        traceback.print_exc()
        return finish("export_failed", export_seconds=time.perf_counter() - t,
                      error=f"PyTorch export failed: {_one_line(e)}", error_detail=str(e)[:3000])
    meta["export_seconds"] = time.perf_counter() - t
    meta["onnx_bytes"] = os.path.getsize(path)
    data = path + ".data"
    meta["data_bytes"] = os.path.getsize(data) if os.path.exists(data) else 0
    try:
        meta.update(_onnx_summary(path))
    except Exception as e:
        return finish("export_failed", error=f"exported file unreadable by onnx: {_one_line(e)}")

    # Inputs keyed by the graph's names: by name first, then by position among the unmatched ones.
    onnx_inputs = [i["name"] for i in meta["onnx_inputs"]]
    given = dict(zip(case.input_names, case.inputs))
    unmatched = [n for n in case.input_names if n not in onnx_inputs]
    feed = {}
    for name in onnx_inputs:
        if name in given:
            feed[name] = given[name].numpy()
        elif unmatched:
            feed[name] = given[unmatched.pop(0)].numpy()
            meta.setdefault("input_renames", {})[name] = "by position"
        else:
            return finish("export_failed", error=f"ONNX input `{name}` matches no PyTorch input")
    dropped = [n for n in case.input_names if n not in onnx_inputs and n in unmatched]
    if dropped:
        meta["inputs_dropped_by_exporter"] = dropped
    onnx_outputs = [o["name"] for o in meta["onnx_outputs"]]
    if len(onnx_outputs) != len(ref):
        return finish("export_failed", error=f"ONNX graph has {len(onnx_outputs)} outputs, PyTorch returned {len(ref)}")
    meta["ref_rms"] = dict(zip(onnx_outputs, rms.values()))
    meta["integer_outputs"] = [n for n, r in zip(onnx_outputs, ref) if common.is_integer(r)]
    np.savez(os.path.join(case_dir, "inputs.npz"), **feed)
    np.savez(os.path.join(case_dir, "expected.npz"), **dict(zip(onnx_outputs, ref)))
    if ref64 is not None:
        np.savez(os.path.join(case_dir, "expected_fp64.npz"), **dict(zip(onnx_outputs, ref64)))
        _record_fp32_error(meta, dict(zip(onnx_outputs, ref)), dict(zip(onnx_outputs, ref64)))
    if fp16 is not None and len(fp16) == len(ref):
        np.savez(os.path.join(case_dir, "torch_fp16.npz"), **dict(zip(onnx_outputs, fp16)))
    meta["batch_symbolic"] = any(isinstance(i["dims"][0], str) for i in meta["onnx_inputs"] if i["dims"])
    return finish("exported")
