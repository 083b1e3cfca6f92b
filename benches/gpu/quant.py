"""kiln's INT8 / FP8 baseline (issue #21): Q/DQ models, implicit INT8 calibration and GEMM references.

Runs on the GPU machine (torch, torchvision, transformers, onnx, onnxruntime, scikit-learn; no
network). Each part is independent, checks its results before it times anything, times its peers
in the same run (CUDA events after a warm-up, medians; kiln through `kiln bench --json`'s GPU
compute median) and adds its figures to `$OUT/quant.json` as soon as it ends:

  resnet50  torchvision ResNet-50 (random weights) -> ONNX -> onnxruntime `quantize_static` Q/DQ
            (per-channel symmetric INT8); kiln fp16 on the fp32 model, kiln `--flag int8 --flag
            fp16` on the Q/DQ model and torch.compile fp16 (channels_last), batch 256; kiln's Q/DQ
            outputs against onnxruntime's CPU run of the same Q/DQ graph and PyTorch fp32.
  bert      the same for BERT-base (last_hidden_state, sequence 128), batch 32.
  vit       the same for torchvision's ViT-B/16 (197 tokens: attention over more keys than
            BERT's), batch 32: a transformer no kernel was tuned on.
  digits    a small CNN trained on scikit-learn's digits; kiln f32 against kiln implicit INT8
            (`--calib`, entropy / minmax / percentile) on the test split's accuracy, and a rebuild
            from the calibration cache alone giving identical outputs.
  gemm      8192^3 references: cuBLASLt INT8 (`torch._int_mm`), FP8 E4M3 (`torch._scaled_mm`)
            and fp16 `torch.matmul` in TOP/s, against kiln on the Q/DQ pattern of an INT8 and an
            FP8 matrix product (ONNX models made here with the onnx helper API).
  layers    a Q/DQ transformer's layers one at a time, at BERT-base b32's shapes by default:
            its INT8 products (`--products`: 4096 rows by 768 -> 768, 768 -> 3072, 3072 -> 768)
            as kiln's Q/DQ product with int8 levels out against its fp16 MatMul, cuBLASLt INT8
            (`torch._int_mm`, int32 sums) and fp16 `torch.matmul`; its LayerNorm islands
            (`--norm-rows`: levels and bias, a residual's levels, LayerNorm, QuantizeLinear)
            against kiln's and PyTorch's fp16 LayerNorm. Seconds a call, where a model part spends
            minutes exporting: the loop for the integer kernels.

`--exporter dynamo` exports resnet50, bert and vit with PyTorch's default exporter instead of the
legacy one. A case kiln cannot build or run is recorded with kiln's error text; the others go on.
Parts that need torch say so when it is missing; `--backend cpu --only gemm,digits` smoke-tests
the kiln side on a machine without a GPU (small `--gemm-size`; digits falls back to a
scikit-learn MLP when torch is absent).

    python benches/gpu/quant.py --kiln .gpu/bin/kiln --out $OUT [--only resnet50,bert,vit,digits,gemm,layers]
        [--batch-resnet 256] [--batch-bert 32] [--seconds 3] [--gemm-size 8192] [--backend cuda]
        [--products 4096x768x768,4096x768x3072,4096x3072x768] [--norm-rows 4096x768]
        [--exporter legacy|dynamo]
"""

import argparse
import collections
import datetime
import json
import logging
import os
import shutil
import subprocess
import sys
import time

import numpy as np

try:
    import torch
except ImportError:  # the kiln-only smoke test on a machine without torch
    torch = None

PARTS = ("resnet50", "bert", "vit", "digits", "gemm", "layers")
# Rough wall time of each part on an H100 (export, quantize, kiln builds, torch.compile, timing):
# a part is skipped, and says so, when fewer seconds than this are left before --deadline-s.
PART_ESTIMATE_S = {"resnet50": 240, "bert": 240, "vit": 240, "digits": 60, "gemm": 120, "layers": 60}
START = time.perf_counter()


def say(message):
    """Progress with the seconds since start: the device command is cut at 10 minutes."""
    print(f"[{time.perf_counter() - START:7.1f}s] {message}", flush=True)


def elapsed_s():
    return time.perf_counter() - START


# ---------------------------------------------------------------------------------------------
# Figures


def rel_l2(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-30))


def max_abs(a, b):
    return float(np.max(np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64))))


def compare(actual, reference):
    """The two error figures every accuracy check reports."""
    return {"rel_l2": rel_l2(actual, reference), "max_abs": max_abs(actual, reference),
            "finite": bool(np.isfinite(actual).all())}


def ratio(numerator, denominator):
    return numerator / denominator if numerator and denominator else None


def error_text(exc):
    return f"{type(exc).__name__}: {exc}"[-2000:]


def guarded(record, key, fn):
    """Runs one case; its failure becomes `record[key] = {"error": ...}` and never stops the part."""
    try:
        record[key] = fn()
    except Exception as e:  # noqa: BLE001 - every case's failure is a figure of the baseline
        say(f"  {key}: FAILED {error_text(e)[:300]}")
        record[key] = {"error": error_text(e)}
    return record[key]


# ---------------------------------------------------------------------------------------------
# kiln's command line


class KilnError(RuntimeError):
    pass


class Kiln:
    """kiln's CLI (build / run / bench), each call logged to quant.log with its whole output."""

    def __init__(self, exe, backend, work, log, deadline_s):
        self.exe, self.backend, self.work, self.log, self.deadline_s = exe, backend, work, log, deadline_s

    def call(self, *args):
        cmd = [self.exe, *map(str, args)]
        self.log.write("$ " + " ".join(cmd) + "\n")
        self.log.flush()
        # A hung command must not take the device command's last minutes: it ends before the deadline.
        timeout = max(30.0, self.deadline_s - elapsed_s()) if self.deadline_s else None
        try:
            proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=timeout)
        except subprocess.TimeoutExpired as e:
            raise KilnError(f"kiln {args[0]} timed out after {timeout:.0f} s") from e
        self.log.write(proc.stdout + "\n")
        self.log.flush()
        if proc.returncode != 0:
            raise KilnError(f"kiln {args[0]} exited {proc.returncode}: {proc.stdout[-1500:].strip()}")
        return proc.stdout

    def build(self, model, engine, flags=(), shapes=None, min_shapes=None):
        """Builds `engine` for `shapes` (min_shapes: a profile's low end, default the same);
        returns kiln's build report (`--json`) with the wall time."""
        report_path = engine + ".build.json"
        text = lambda dims_by_name: ",".join(f"{n}:{'x'.join(map(str, d))}" for n, d in dims_by_name.items())
        profile = []
        if shapes:
            profile = ["--min-shapes", text(min_shapes or shapes), "--opt-shapes", text(shapes),
                       "--max-shapes", text(shapes)]
        t0 = time.perf_counter()
        self.call("build", model, "-o", engine, "--backend", self.backend, *flags, *profile,
                  "--timing-cache", os.path.join(self.work, "timing.cache"), "--json", report_path)
        with open(report_path) as f:
            report = json.load(f)
        keep = ("build_s", "flags", "layers_before_passes", "engine_bytes", "weights_bytes", "peak_activation_bytes")
        layers = report.get("layers")
        if isinstance(layers, list):  # one entry a layer: keep how many layers ran each tactic
            tactics = collections.Counter(layer.get("tactic", "?") for layer in layers)
            layers = {"count": len(layers), "tactics": dict(tactics.most_common())}
        return {"wall_s": time.perf_counter() - t0, "layers": layers, **{k: report.get(k) for k in keep}}

    def run(self, engine, inputs_npz):
        """Runs `engine` once on the arrays of `inputs_npz`; returns its outputs by name."""
        out = os.path.splitext(inputs_npz)[0] + "." + os.path.basename(engine) + ".out.npz"
        self.call("run", engine, "--inputs", inputs_npz, "--save-outputs", out)
        with np.load(out) as z:
            return {k: z[k] for k in z.files}

    def bench(self, engine, inputs_npz, seconds):
        """`kiln bench --json`: the GPU compute median when the backend reports device timings
        (like-for-like with PyTorch's device-resident timings), else the host latency median."""
        report_path = engine + ".bench.json"
        self.call("bench", engine, "--inputs", inputs_npz, "--warmup-ms", 500, "--duration-s", seconds,
                  "--json", report_path)
        with open(report_path) as f:
            report = json.load(f)
        gpu = report.get("gpu_compute_ms")
        gpu = gpu.get("median") if isinstance(gpu, dict) else None
        return {"ms": gpu or report["latency_ms"]["median"], "ms_as": "gpu compute" if gpu else "host latency",
                "gpu_compute_median_ms": gpu, "latency_median_ms": report["latency_ms"]["median"],
                "cuda_graph": report.get("cuda_graph"), "iterations": report.get("iterations")}

    def layer_profile(self, engine, inputs_npz, top=8):
        """`kiln bench --export-profile`: each layer timed alone (interpreted, so a layer's launch
        overhead is in its figure: compare engines by their end-to-end medians, and layers by
        this), summed per tactic; the `top` largest, and every layer with its time."""
        path = engine + ".profile.json"
        self.call("bench", engine, "--inputs", inputs_npz, "--warmup-ms", 200, "--duration-s", 1,
                  "--export-profile", path)
        with open(path) as f:
            layers = json.load(f)["layers"]
        by_tactic = {}
        for layer in layers:
            total = by_tactic.setdefault(layer["tactic"], {"us": 0.0, "layers": 0})
            total["us"] += 1e3 * layer["median_ms"]
            total["layers"] += 1
        ranked = sorted(by_tactic.items(), key=lambda kv: -kv[1]["us"])[:top]
        return {"by_tactic": [{"tactic": t, **v} for t, v in ranked],
                "layers": [{"name": l["name"][:120], "tactic": l["tactic"], "us": 1e3 * l["median_ms"]} for l in layers]}


def save_npz(path, arrays):
    np.savez(path, **arrays)
    return path


# ---------------------------------------------------------------------------------------------
# Q/DQ models (parts resnet50 and bert)


def count_ops(model_path, *op_types):
    import onnx

    model = onnx.load(model_path, load_external_data=False)
    return {op: sum(node.op_type == op for node in model.graph.node) for op in op_types}


def quantize_qdq(fp32_path, qdq_path, calibration, op_types):
    """onnxruntime's static Q/DQ quantization: per-channel symmetric INT8 weights, symmetric
    INT8 activations (TensorRT's explicit-quantization form), MinMax ranges over `calibration`
    (a list of feed dicts)."""
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

    class Batches(CalibrationDataReader):
        def __init__(self):
            self.batches = iter(calibration)

        def get_next(self):
            return next(self.batches, None)

    logging.getLogger().setLevel(logging.ERROR)  # its advice to pre-process: the exporter folded BatchNorm already
    quantize_static(fp32_path, qdq_path, Batches(), quant_format=QuantFormat.QDQ, per_channel=True,
                    activation_type=QuantType.QInt8, weight_type=QuantType.QInt8, op_types_to_quantize=op_types,
                    extra_options={"ActivationSymmetric": True, "WeightSymmetric": True})
    return count_ops(qdq_path, "QuantizeLinear", "DequantizeLinear")


def ort_run(model_path, feeds, optimize):
    """onnxruntime on the CPU. `optimize=False` runs every QuantizeLinear / DequantizeLinear as
    written, in float: the Q/DQ graph's exact meaning, kiln's reference. With graph optimizations
    onnxruntime fuses them into its own INT8 kernels, whose x86 paths may saturate 16-bit
    intermediates on CPUs without VNNI: reported, not checked."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    if not optimize:
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(model_path, options, providers=["CPUExecutionProvider"])
    return session.run(None, feeds)[0]


def qdq_kiln(args, kiln, tag, fp32_path, qdq_path, inputs, output, check_rows, reference, low_err):
    """kiln's two engines of one model: fp16 on the fp32 model, INT8+fp16 on the Q/DQ model.

    `inputs`: the timing batch by input name; `output`: the output compared; `reference`: PyTorch
    fp32 outputs of the first `check_rows` rows (onnxruntime checks those rows only: its CPU run of
    a big batch is slow); `low_err`: PyTorch's own fp16 error, for the fp16 tier. Both engines are
    checked, then timed; the Q/DQ engine is timed even outside its tier (`correct` says so) unless
    its outputs are not finite.
    """
    work = args.work
    npz = save_npz(os.path.join(work, f"{tag}_in.npz"), inputs)
    shapes = {name: x.shape for name, x in inputs.items()}
    rows = {name: x[:check_rows] for name, x in inputs.items()}
    result = {"check_rows": check_rows}

    say(f"{tag}: onnxruntime CPU on the Q/DQ model ({check_rows} rows; as written, and with its INT8 kernels)")
    ort_out = ort_run(qdq_path, rows, optimize=False)
    result["ort_qdq_vs_torch_fp32"] = compare(ort_out, reference)
    ort_int8 = guarded(result, "ort_int8_kernels", lambda: {"out": ort_run(qdq_path, rows, optimize=True)})
    ort_int8_out = ort_int8.pop("out", None)
    if ort_int8_out is not None:
        result["ort_int8_kernels"]["vs_torch_fp32"] = compare(ort_int8_out, reference)

    def engine_case(name, model, flags):
        engine = os.path.join(work, f"{tag}_{name}.kiln")
        say(f"{tag}: kiln build {name} ({' '.join(flags)})")
        case = {"build": kiln.build(model, engine, flags, shapes)}
        say(f"{tag}: kiln run {name}")
        out = kiln.run(engine, npz)[output][:check_rows]
        case["vs_torch_fp32"] = compare(out, reference)
        return case, engine, out

    def timed(case, engine, name):
        say(f"{tag}: kiln bench {name}")
        case["bench"] = kiln.bench(engine, npz, args.seconds)
        if args.layer_profile:
            guarded(case, "profile", lambda: kiln.layer_profile(engine, npz))

    def fp16_case():
        case, engine, _ = engine_case("fp16", fp32_path, ["--flag", "fp16"])
        # harness.py's tier: within 3x PyTorch's own fp16 error, or 1e-2.
        case["tolerance_rel_l2"] = max(3 * low_err, 1e-2) if low_err is not None else 1e-2
        err = case["vs_torch_fp32"]
        case["correct"] = err["finite"] and err["rel_l2"] <= case["tolerance_rel_l2"]
        timed(case, engine, "fp16")
        return case

    def qdq_case():
        case, engine, out = engine_case("qdq", qdq_path, ["--flag", "int8", "--flag", "fp16"])
        case["vs_ort_qdq"] = compare(out, ort_out)
        if ort_int8_out is not None:
            case["vs_ort_int8_kernels"] = compare(out, ort_int8_out)
        # kiln computes the quantized network when it is nearer onnxruntime's run of the same
        # Q/DQ graph than that run is to fp32 (fp16 rounding flips a few values across a
        # quantization step: less than the quantization's own noise), and its error to fp32 is
        # of the quantization's size.
        quant_err = result["ort_qdq_vs_torch_fp32"]["rel_l2"]
        case["tolerance_rel_l2_vs_ort"] = max(quant_err, 2e-2)
        case["tolerance_rel_l2_vs_torch_fp32"] = 2 * quant_err + 1e-2
        case["correct"] = bool(case["vs_ort_qdq"]["finite"]
                               and case["vs_ort_qdq"]["rel_l2"] <= case["tolerance_rel_l2_vs_ort"]
                               and case["vs_torch_fp32"]["rel_l2"] <= case["tolerance_rel_l2_vs_torch_fp32"])
        if not case["vs_ort_qdq"]["finite"]:
            case["error"] = "kiln's Q/DQ outputs are not finite; not timed"
            return case
        timed(case, engine, "qdq")
        return case

    if not args.qdq_only:
        guarded(result, "kiln_fp16", fp16_case)
    guarded(result, "kiln_qdq", qdq_case)
    return result


def qdq_part(args, kiln, name):
    """Parts resnet50, bert and vit: export, Q/DQ-quantize, check and time kiln and torch.compile."""
    need_cuda()
    import harness  # beside this file: the models, their inputs and the exporter harness.py uses

    batch = {"resnet50": args.batch_resnet, "bert": args.batch_bert, "vit": args.batch_vit}[name]
    check_rows = min(args.check_rows, batch)
    torch.manual_seed(0)
    model, input_names, output_names = harness.MODELS[name]()
    part = {"batch": batch, "calib_batches": args.calib_batches, "calib_batch": args.calib_batch,
            "qdq_op_types": args.qdq_ops.split(",")}

    fp32_path = os.path.join(args.work, f"{name}.onnx")
    qdq_path = os.path.join(args.work, f"{name}.qdq.onnx")
    say(f"{name}: export to ONNX ({args.exporter} exporter, dynamic batch)")
    part["exporter"] = args.exporter
    t0 = time.perf_counter()
    harness.export(model, input_names, output_names, harness.make_inputs(name, 2, np.random.default_rng(2)), fp32_path,
                   args.exporter)
    part["export_s"] = time.perf_counter() - t0

    say(f"{name}: quantize_static Q/DQ over {args.calib_batches} random batches of {args.calib_batch}")
    rng = np.random.default_rng(1)
    calibration = [dict(zip(input_names, harness.make_inputs(name, args.calib_batch, rng)))
                   for _ in range(args.calib_batches)]
    t0 = time.perf_counter()
    part["qdq_nodes"] = quantize_qdq(fp32_path, qdq_path, calibration, part["qdq_op_types"])
    part["quantize_s"] = time.perf_counter() - t0

    inputs = dict(zip(input_names, harness.make_inputs(name, batch, np.random.default_rng(0))))
    say(f"{name}: PyTorch fp32 reference (CPU, first {check_rows} rows) and PyTorch fp16's error")
    with torch.no_grad():  # on the CPU: exact fp32, whatever the GPU's TF32 settings
        reference = model(*(torch.from_numpy(x[:check_rows]) for x in inputs.values())).numpy()
    dev = torch.device("cuda")
    torch_in = [torch.from_numpy(x).to(dev) for x in inputs.values()]
    low_model = model.to(dev).half()
    low_in = [x.half() if x.is_floating_point() else x for x in torch_in]
    if name == "resnet50":  # PyTorch's fastest CNN layout on tensor cores, as harness.py times it
        low_model = low_model.to(memory_format=torch.channels_last)
        low_in = [x.contiguous(memory_format=torch.channels_last) for x in low_in]
    with torch.no_grad():
        low_err = rel_l2(low_model(*low_in)[:check_rows].float().cpu().numpy(), reference)
    part["torch_fp16_vs_torch_fp32_rel_l2"] = low_err

    part.update(qdq_kiln(args, kiln, name, fp32_path, qdq_path, inputs, output_names[0], check_rows, reference,
                         low_err))

    def compile_case():
        say(f"{name}: torch.compile fp16 (default mode) and timing")
        with torch.no_grad():
            compiled = torch.compile(low_model)
            t0 = time.perf_counter()
            compiled(*low_in)
            torch.cuda.synchronize()
            compile_s = time.perf_counter() - t0
            times = harness.cuda_times_ms(lambda: compiled(*low_in), 1.0, args.iterations)
            return {"compile_s": compile_s, **harness.summary(times)}

    if not args.qdq_only:
        guarded(part, "torch_compile_fp16", compile_case)
    fp16_ms = (part.get("kiln_fp16", {}).get("bench") or {}).get("ms")
    qdq_ms = (part["kiln_qdq"].get("bench") or {}).get("ms")
    compile_ms = part.get("torch_compile_fp16", {}).get("median_ms")
    part["ratios"] = {"kiln_qdq_over_kiln_fp16": ratio(qdq_ms, fp16_ms),
                      "kiln_qdq_over_torch_compile_fp16": ratio(qdq_ms, compile_ms),
                      "kiln_fp16_over_torch_compile_fp16": ratio(fp16_ms, compile_ms)}
    return part


# ---------------------------------------------------------------------------------------------
# Implicit INT8 with calibration (part digits)


def digits_data():
    """scikit-learn's bundled 8x8 digits (no download), a fixed stratified split, in [0, 1]."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    digits = load_digits()
    x = (digits.images / 16.0).astype(np.float32)[:, None, :, :]
    y = digits.target.astype(np.int64)
    return train_test_split(x, y, test_size=0.25, random_state=0, stratify=y)


def train_digits_cnn(x_train, y_train, x_test, path, epochs):
    """A small CNN trained on the GPU with a fixed seed, exported to ONNX (input `image`)."""
    from torch import nn

    torch.manual_seed(0)
    dev = torch.device("cuda")
    model = nn.Sequential(nn.Conv2d(1, 32, 3, padding=1), nn.ReLU(), nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(),
                          nn.MaxPool2d(2), nn.Conv2d(64, 64, 3, padding=1), nn.ReLU(), nn.Flatten(),
                          nn.Linear(64 * 4 * 4, 10)).to(dev)
    opt = torch.optim.Adam(model.parameters(), lr=2e-3)
    xt, yt = torch.from_numpy(x_train).to(dev), torch.from_numpy(y_train).to(dev)
    gen = torch.Generator(device="cpu").manual_seed(0)
    t0 = time.perf_counter()
    for _ in range(epochs):
        order = torch.randperm(len(xt), generator=gen).to(dev)
        for i in range(0, len(xt), 64):
            idx = order[i:i + 64]
            opt.zero_grad()
            nn.functional.cross_entropy(model(xt[idx]), yt[idx]).backward()
            opt.step()
    torch.cuda.synchronize()
    train_s = time.perf_counter() - t0
    model = model.eval().cpu()
    with torch.no_grad():
        logits = model(torch.from_numpy(x_test)).numpy()
        torch.onnx.export(model, (torch.from_numpy(x_test[:2]),), path, input_names=["image"], output_names=["logits"],
                          dynamic_axes={"image": {0: "batch"}, "logits": {0: "batch"}}, opset_version=17, dynamo=False)
    return {"trainer": "torch cnn (3 conv + linear, Adam, cuda)", "epochs": epochs, "train_s": train_s}, logits


def train_digits_mlp(x_train, y_train, x_test, path):
    """Without torch (the local smoke test): a scikit-learn MLP written as ONNX Gemm layers."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    from sklearn.neural_network import MLPClassifier

    t0 = time.perf_counter()
    mlp = MLPClassifier(hidden_layer_sizes=(64,), max_iter=500, random_state=0)
    mlp.fit(x_train.reshape(len(x_train), -1), y_train)
    train_s = time.perf_counter() - t0
    w1, w2 = (w.astype(np.float32) for w in mlp.coefs_)
    b1, b2 = (b.astype(np.float32) for b in mlp.intercepts_)
    graph = helper.make_graph(
        [helper.make_node("Flatten", ["image"], ["flat"], axis=1),
         helper.make_node("Gemm", ["flat", "w1", "b1"], ["h"]), helper.make_node("Relu", ["h"], ["r"]),
         helper.make_node("Gemm", ["r", "w2", "b2"], ["logits"])],
        "digits_mlp", [helper.make_tensor_value_info("image", TensorProto.FLOAT, ["batch", 1, 8, 8])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", 10])],
        [numpy_helper.from_array(a, n) for a, n in ((w1, "w1"), (b1, "b1"), (w2, "w2"), (b2, "b2"))])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    onnx.checker.check_model(model)
    onnx.save(model, path)
    logits = np.maximum(x_test.reshape(len(x_test), -1) @ w1 + b1, 0) @ w2 + b2
    return {"trainer": "scikit-learn MLP (torch not available)", "train_s": train_s}, logits


def digits_part(args, kiln):
    """Implicit INT8: kiln measures ranges over a calibration folder (three methods); the test
    split's accuracy against f32, and a rebuild from the calibration cache alone."""
    work = os.path.join(args.work, "digits")
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    x_train, x_test, y_train, y_test = digits_data()
    model_path = os.path.join(work, "digits.onnx")
    say(f"digits: training on {len(x_train)} images, testing on {len(x_test)}")
    if torch is not None and torch.cuda.is_available():
        part, logits = train_digits_cnn(x_train, y_train, x_test, model_path, args.digits_epochs)
    else:
        part, logits = train_digits_mlp(x_train, y_train, x_test, model_path)
    accuracy = lambda out: float(np.mean(np.argmax(out, axis=1) == y_test))
    part.update({"n_train": len(x_train), "n_test": len(x_test), "reference_accuracy": accuracy(logits)})

    # One .npz per calibration batch, arrays named as the ONNX input, from the training split.
    calib = os.path.join(work, "calib")
    os.makedirs(calib)
    for i, start in enumerate(range(0, len(x_train) - args.digits_calib_batch + 1, args.digits_calib_batch)):
        save_npz(os.path.join(calib, f"batch_{i:03d}.npz"), {"image": x_train[start:start + args.digits_calib_batch]})
    part["calib_files"] = len(os.listdir(calib))
    test_npz = save_npz(os.path.join(work, "test.npz"), {"image": x_test})
    # Tuned for the test split; the profile reaches down to the calibration batches, which the
    # calibration runs through it.
    shapes = {"image": x_test.shape}
    min_shapes = {"image": (min(args.digits_calib_batch, len(x_test)), 1, 8, 8)}

    def engine(name, flags):
        path = os.path.join(work, f"{name}.kiln")
        say(f"digits: kiln build {name} {' '.join(flags)}")
        # Exact f32 around the quantized layers (no TF32): the INT8 engines differ from f32 by INT8 alone.
        build = kiln.build(model_path, path, ["--no-tf32", *flags], shapes, min_shapes)
        out = kiln.run(path, test_npz)["logits"]
        return {"build": build, "accuracy": accuracy(out)}, out

    case, f32_out = engine("f32", [])
    case["vs_reference"] = compare(f32_out, logits)
    part["kiln_f32"] = case
    outputs = {}

    def int8_case(method):
        cache = os.path.join(work, f"{method}.calib")
        case, out = engine(f"int8_{method}", ["--flag", "int8", "--calib", calib, "--calib-cache", cache,
                                              "--calib-method", method])
        case.update({"vs_kiln_f32": compare(out, f32_out), "calib_cache_bytes": os.path.getsize(cache),
                     "accuracy_drop_points": 100 * (part["kiln_f32"]["accuracy"] - case["accuracy"]),
                     "predictions_agree_with_f32": float(np.mean(np.argmax(out, 1) == np.argmax(f32_out, 1)))})
        outputs[method] = out
        return case

    for method in ("entropy", "minmax", "percentile"):
        guarded(part, f"kiln_int8_{method}", lambda: int8_case(method))

    def cache_case():
        if "entropy" not in outputs:
            raise KilnError("no entropy engine to compare with")
        cache = os.path.join(work, "entropy.calib")
        case, out = engine("int8_entropy_from_cache", ["--flag", "int8", "--calib-cache", cache,
                                                        "--calib-method", "entropy"])
        case["identical"] = bool(np.array_equal(out, outputs["entropy"]))
        case["max_abs_vs_calibrated"] = max_abs(out, outputs["entropy"])
        return case

    guarded(part, "cache_roundtrip", cache_case)
    entropy = part["kiln_int8_entropy"]
    part["checks"] = {
        "reference_accuracy_ge_95": part["reference_accuracy"] >= 0.95,
        "kiln_f32_predictions_match_reference": bool(np.array_equal(np.argmax(f32_out, 1), np.argmax(logits, 1))),
        "int8_entropy_drop_le_0_5_points": "accuracy" in entropy and entropy["accuracy_drop_points"] <= 0.5,
        "calib_cache_roundtrip_identical": part["cache_roundtrip"].get("identical", False),
    }
    return part


# ---------------------------------------------------------------------------------------------
# GEMM references and the Q/DQ matrix-product models (part gemm)

FP8_MAX = 448.0  # float8 e4m3fn's largest finite magnitude


def to_fp8(x):
    """float32 -> float8 e4m3fn (saturating, as QuantizeLinear's default `saturate=1`), as
    uint8 bit patterns and their exact float32 values."""
    import ml_dtypes  # onnx's own dependency

    f8 = np.clip(x, -FP8_MAX, FP8_MAX).astype(ml_dtypes.float8_e4m3fn)
    return f8.view(np.uint8), f8.astype(np.float32)


def gemm_data(n, kind, input_dtype, rng):
    """The operands of one Q/DQ product `Y = DQ(Q(A, sa), sa) @ DQ(Bq, sb)`, B's scales per column.

    Returns A, sa, A quantized (int8, or fp8 bits) and dequantized, Bq (int8 / fp8 bits), Bq's
    values and sb, all as f32 but A, sa and sb exactly representable in `input_dtype` (the model's
    float type), so the reference sees the values the engine reads."""
    representable = lambda x: np.asarray(x, input_dtype).astype(np.float32)
    a = representable(rng.standard_normal((n, n), dtype=np.float32))
    if kind == "int8":
        sa = representable(np.abs(a).max() / 127)
        aq = np.clip(np.rint(a / sa), -128, 127).astype(np.int8)
        a_deq = aq.astype(np.float32) * sa
        bq = rng.integers(-127, 128, size=(n, n), dtype=np.int8)
        b_val = bq.astype(np.float32)
        sb = representable((0.5 + rng.random(n)) / 127)
    else:
        sa = representable(np.abs(a).max() / FP8_MAX)
        aq, a_val = to_fp8(a / sa)
        a_deq = a_val * sa
        bq, b_val = to_fp8(rng.standard_normal((n, n), dtype=np.float32) * 100)
        sb = representable((0.5 + rng.random(n)) / 100)
    return {"a": a, "sa": sa, "aq": aq, "a_deq": a_deq, "bq": bq, "b_val": b_val, "sb": sb}


def gemm_qdq_model(data, kind, input_dtype):
    """The ONNX Q/DQ pattern of an INT8 or FP8 matrix product, built with the onnx helper API:
    A (input, f32 or f16) through QuantizeLinear + DequantizeLinear with a per-tensor scale, B an
    int8 / float8e4m3fn initializer with a DequantizeLinear of per-column scales (axis=1)."""
    import onnx
    from onnx import TensorProto, helper

    n = data["a"].shape[0]
    elem = TensorProto.FLOAT16 if input_dtype == "f16" else TensorProto.FLOAT
    scale_np = np.float16 if input_dtype == "f16" else np.float32
    q = TensorProto.INT8 if kind == "int8" else TensorProto.FLOAT8E4M3FN
    def raw(name, dtype, dims, arr):  # raw bytes: float8 needs no numpy type of its own
        return helper.make_tensor(name, dtype, dims, np.ascontiguousarray(arr).tobytes(), raw=True)

    initializers = [
        raw("sa", elem, [], np.array(data["sa"], scale_np)),
        raw("za", q, [], np.zeros((), np.uint8 if kind == "fp8" else np.int8)),
        raw("Bq", q, [n, n], data["bq"]),
        raw("sb", elem, [n], data["sb"].astype(scale_np)),
    ]
    nodes = [
        helper.make_node("QuantizeLinear", ["A", "sa", "za"], ["Aq"]),
        helper.make_node("DequantizeLinear", ["Aq", "sa", "za"], ["A_deq"]),
        helper.make_node("DequantizeLinear", ["Bq", "sb"], ["B_deq"], axis=1),
        helper.make_node("MatMul", ["A_deq", "B_deq"], ["Y"]),
    ]
    graph = helper.make_graph(nodes, f"qdq_{kind}_matmul", [helper.make_tensor_value_info("A", elem, [n, n])],
                              [helper.make_tensor_value_info("Y", elem, [n, n])], initializers)
    # Opset 19: QuantizeLinear / DequantizeLinear with float8 and f16 scales; IR 9 carries float8.
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)], ir_version=9)
    onnx.checker.check_model(model)
    return model


def gemm_reference(data, rows):
    """f32 reference of the first `rows` rows of DQ(Q(A)) @ DQ(Bq): what every engine should give."""
    return data["a_deq"][:rows] @ (data["b_val"] * data["sb"])


def tops(n, ms):
    return 2.0 * n ** 3 / (ms * 1e-3) / 1e12 if ms else None


def torch_gemm_refs(args, n, int8, fp8):
    """cuBLASLt through PyTorch on the same operands: INT8 `_int_mm`, FP8 `_scaled_mm`
    (tensorwise and rowwise scales), fp16 `matmul`; each checked on its first rows first."""
    import harness  # its CUDA-event timing and medians

    dev, rows = torch.device("cuda"), min(args.check_rows_gemm, n)
    time_it = lambda fn: harness.summary(harness.cuda_times_ms(fn, 0.5, args.iterations))
    refs = {}

    def int_mm():
        a = torch.from_numpy(int8["aq"]).to(dev)
        b_row = torch.from_numpy(int8["bq"]).to(dev)
        b_col = b_row.t().contiguous().t()  # same values, column-major: cuBLASLt's INT8 "TN" layout
        exact = int8["aq"][:rows].astype(np.float64) @ int8["bq"].astype(np.float64)
        case = {}
        for layout, b in (("b_col_major", b_col), ("b_row_major", b_row)):
            def one():
                got = torch._int_mm(a, b)[:rows].double().cpu().numpy()
                return {"exact": bool(np.array_equal(got, exact)), **time_it(lambda: torch._int_mm(a, b))}

            guarded(case, layout, one)
        timed = [k for k in ("b_col_major", "b_row_major") if "median_ms" in case[k]]
        if timed:
            best = min(timed, key=lambda k: case[k]["median_ms"])
            case.update({"best_layout": best, "median_ms": case[best]["median_ms"],
                         "tops": tops(n, case[best]["median_ms"]), "correct": all(case[k]["exact"] for k in timed)})
        return case

    def scaled_mm():
        f8 = torch.float8_e4m3fn
        a = torch.from_numpy(fp8["aq"]).to(dev).view(f8)
        b = torch.from_numpy(fp8["bq"]).to(dev).view(f8).t().contiguous().t()  # B column-major, as cuBLASLt needs
        case = {}
        recipes = {
            # One scale per operand (B's: 1/100, its columns' typical scale, keeping fp16 out of overflow).
            "tensorwise": (torch.tensor(float(fp8["sa"]), device=dev), torch.tensor(0.01, device=dev), torch.float16,
                           fp8["a_deq"][:rows] @ fp8["b_val"] * np.float32(0.01)),
            # sa per row of A, sb per column of B (the ONNX model's scales); cuBLASLt wants bf16 out.
            "rowwise": (torch.full((n, 1), float(fp8["sa"]), device=dev),
                        torch.from_numpy(fp8["sb"]).to(dev).reshape(1, n), torch.bfloat16, gemm_reference(fp8, rows)),
        }
        for recipe, (sa, sb, out_dtype, want) in recipes.items():
            def call():
                out = torch._scaled_mm(a, b, scale_a=sa, scale_b=sb, out_dtype=out_dtype)
                return out[0] if isinstance(out, tuple) else out  # before 2.5 it also returned amax

            def one():
                got = call()[:rows].float().cpu().numpy()
                err = rel_l2(got, want)
                return {"rel_l2": err, "correct": err <= 1e-2, **time_it(call)}

            guarded(case, recipe, one)
        timed = [k for k in recipes if "median_ms" in case[k]]
        if timed:
            best = min(timed, key=lambda k: case[k]["median_ms"])
            case.update({"best": best, "median_ms": case[best]["median_ms"], "tops": tops(n, case[best]["median_ms"])})
        return case

    def fp16_matmul():
        a = torch.from_numpy(int8["a_deq"]).to(dev).half()
        b = torch.from_numpy(int8["b_val"] * int8["sb"]).to(dev).half()
        err = rel_l2(torch.matmul(a, b)[:rows].float().cpu().numpy(), gemm_reference(int8, rows))
        case = {"rel_l2": err, "correct": err <= 1e-2, **time_it(lambda: torch.matmul(a, b))}
        case["tops"] = tops(n, case["median_ms"])
        return case

    say(f"gemm: torch._int_mm {n}^3")
    guarded(refs, "cublaslt_int8_int_mm", int_mm)
    say(f"gemm: torch._scaled_mm fp8 e4m3 {n}^3")
    guarded(refs, "cublaslt_fp8_scaled_mm", scaled_mm)
    say(f"gemm: torch.matmul fp16 {n}^3")
    guarded(refs, "cublas_fp16_matmul", fp16_matmul)
    return refs


def gemm_part(args, kiln):
    """8192^3: cuBLASLt's INT8 / FP8 / fp16 rates, and kiln on the Q/DQ matrix-product models."""
    n, rows = args.gemm_size, min(args.check_rows_gemm, args.gemm_size)
    work = os.path.join(args.work, "gemm")
    os.makedirs(work, exist_ok=True)
    rng = np.random.default_rng(0)
    say(f"gemm: operands {n}x{n} (int8 and fp8)")
    np_dtype = np.float16 if args.gemm_input_dtype == "f16" else np.float32
    data = {kind: gemm_data(n, kind, np_dtype, rng) for kind in ("int8", "fp8")}
    part = {"n": n, "input_dtype": args.gemm_input_dtype, "check_rows": rows}
    if torch is not None and torch.cuda.is_available():
        part["torch"] = torch_gemm_refs(args, n, data["int8"], data["fp8"])
    else:
        part["torch"] = {"skipped": "no torch with CUDA here"}

    def kiln_case(kind):
        import onnx

        # Written at run time: an 8192^2 initializer is 64 MB and never goes in the repository.
        model_path = os.path.join(work, f"qdq_{kind}_{n}.onnx")
        say(f"gemm: writing {os.path.basename(model_path)}")
        onnx.save(gemm_qdq_model(data[kind], kind, args.gemm_input_dtype), model_path)
        npz = save_npz(os.path.join(work, f"a_{kind}_{n}.npz"), {"A": data[kind]["a"].astype(np_dtype)})
        engine = os.path.join(work, f"qdq_{kind}_{n}.kiln")
        say(f"gemm: kiln build {kind} Q/DQ (--flag int8 --flag fp16)")
        case = {"build": kiln.build(model_path, engine, ["--flag", "int8", "--flag", "fp16"])}
        out = kiln.run(engine, npz)["Y"][:rows]
        case["vs_reference"] = compare(out, gemm_reference(data[kind], rows))
        case["correct"] = case["vs_reference"]["finite"] and case["vs_reference"]["rel_l2"] <= 1e-2
        say(f"gemm: kiln bench {kind} Q/DQ")
        case["bench"] = kiln.bench(engine, npz, args.seconds)
        case["tops"] = tops(n, case["bench"]["ms"])
        return case

    for kind in ("int8", "fp8"):
        guarded(part, f"kiln_qdq_{kind}", lambda: kiln_case(kind))
    ms = lambda d: d.get("median_ms") if isinstance(d, dict) else None
    t = part["torch"]
    k_int8, k_fp8 = (part[f"kiln_qdq_{k}"].get("bench", {}).get("ms") for k in ("int8", "fp8"))
    part["ratios"] = {  # time ratios: above 1, kiln is slower
        "kiln_int8_over_cublaslt_int8": ratio(k_int8, ms(t.get("cublaslt_int8_int_mm"))),
        "kiln_int8_over_cublas_fp16": ratio(k_int8, ms(t.get("cublas_fp16_matmul"))),
        "kiln_fp8_over_cublaslt_fp8": ratio(k_fp8, ms(t.get("cublaslt_fp8_scaled_mm"))),
        "kiln_fp8_over_cublas_fp16": ratio(k_fp8, ms(t.get("cublas_fp16_matmul"))),
    }
    return part


# ---------------------------------------------------------------------------------------------
# A Q/DQ transformer's layers one at a time (part layers)


def product_qdq_model(m, k, n, data):
    """`Q(A) -> DQ -> MatMul(DQ(Bq, per-column sb)) -> Q(sy)`: an f16 input, int8 levels out."""
    import onnx
    from onnx import TensorProto, helper

    f16, i8 = TensorProto.FLOAT16, TensorProto.INT8
    init = [helper.make_tensor("sa", f16, [], [float(data["sa"])]), helper.make_tensor("z", i8, [], [0]),
            helper.make_tensor("Bq", i8, [k, n], data["bq"].tobytes(), raw=True),
            helper.make_tensor("sb", f16, [n], data["sb"].astype(np.float16).tobytes(), raw=True),
            helper.make_tensor("sy", f16, [], [float(data["sy"])])]
    nodes = [helper.make_node("QuantizeLinear", ["A", "sa", "z"], ["Aq"]),
             helper.make_node("DequantizeLinear", ["Aq", "sa", "z"], ["A_deq"]),
             helper.make_node("DequantizeLinear", ["Bq", "sb"], ["B_deq"], axis=1),
             helper.make_node("MatMul", ["A_deq", "B_deq"], ["Y"]),
             helper.make_node("QuantizeLinear", ["Y", "sy", "z"], ["Yq"])]
    graph = helper.make_graph(nodes, "qdq_product", [helper.make_tensor_value_info("A", f16, [m, k])],
                              [helper.make_tensor_value_info("Yq", i8, [m, n])], init)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)], ir_version=9)
    onnx.checker.check_model(model)
    return model


def product_fp16_model(m, k, n, b):
    """The same product in fp16: `A · B`, B the dequantized weights."""
    import onnx
    from onnx import TensorProto, helper

    f16 = TensorProto.FLOAT16
    init = [helper.make_tensor("B", f16, [k, n], b.astype(np.float16).tobytes(), raw=True)]
    graph = helper.make_graph([helper.make_node("MatMul", ["A", "B"], ["Y"])], "fp16_product",
                              [helper.make_tensor_value_info("A", f16, [m, k])], [helper.make_tensor_value_info("Y", f16, [m, n])], init)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)], ir_version=9)
    onnx.checker.check_model(model)
    return model


def layer_case(kiln, args, name, model, inputs, flags, check):
    """Writes `model`, builds it with `flags`, runs it on `inputs` (checked by `check`, which gives
    the case's accuracy figures and `correct`) and benches it."""
    import onnx

    work = os.path.join(args.work, "layers")
    os.makedirs(work, exist_ok=True)
    path, engine = os.path.join(work, f"{name}.onnx"), os.path.join(work, f"{name}.kiln")
    onnx.save(model, path)
    npz = save_npz(os.path.join(work, f"{name}.npz"), inputs)
    say(f"layers {name}: kiln {' '.join(flags)}")
    result = {"build": kiln.build(path, engine, flags)}
    result.update(check(kiln.run(engine, npz)))
    result["bench"] = kiln.bench(engine, npz, args.seconds)
    return result


def levels_check(got, want):
    """Levels a step apart where the f64 reference lies within rounding of a half (f32 scales)."""
    off = int((np.abs(np.asarray(got, np.float64)[: len(want)] - want) > 1).sum())
    return {"levels_off_by_more_than_one": off, "correct": off == 0}


def float_check(got, reference):
    figures = compare(np.asarray(got)[: len(reference)], reference)
    return {"vs_reference": figures, "correct": figures["rel_l2"] <= 1e-2}


def torch_time(args, fn):
    import harness

    return harness.summary(harness.cuda_times_ms(fn, 0.5, args.iterations))


def products(args, kiln, part):
    """Each `MxKxN` of --products: kiln's INT8 product (levels out) and fp16 MatMul, cuBLASLt's INT8
    and fp16 on the same operands; kiln's levels checked against the f64 reference's first."""
    rng = np.random.default_rng(0)
    part["products"] = {}
    for shape in [x for x in args.products.split(",") if x]:
        m, k, n = (int(d) for d in shape.split("x"))
        rows = min(args.check_rows_gemm, m)
        a = rng.standard_normal((m, k), dtype=np.float32).astype(np.float16)
        sa = np.float16(np.abs(a).max() / 127)
        aq = np.clip(np.rint(a.astype(np.float32) / np.float32(sa)), -128, 127).astype(np.int8)
        bq = rng.integers(-127, 128, size=(k, n), dtype=np.int8)
        sb = ((0.5 + rng.random(n)) / 127).astype(np.float16)
        b = bq.astype(np.float64) * sb.astype(np.float64)
        exact = aq[:rows].astype(np.float64) @ bq.astype(np.float64) * float(sa) * sb.astype(np.float64)
        # The output's grid: its first rows' range over 127, so the levels spread over int8.
        sy = np.float16(np.abs(exact).max() / 127)
        want = np.clip(np.rint(exact / float(sy)), -128, 127)
        case = {"tops_per_ms": 2.0 * m * k * n / 1e9}
        guarded(case, "kiln_int8", lambda: layer_case(
            kiln, args, f"int8_{shape}", product_qdq_model(m, k, n, {"sa": sa, "bq": bq, "sb": sb, "sy": sy}), {"A": a},
            ["--flag", "int8", "--flag", "fp16"], lambda out: levels_check(out["Yq"], want)))
        guarded(case, "kiln_fp16", lambda: layer_case(
            kiln, args, f"fp16_{shape}", product_fp16_model(m, k, n, b), {"A": a}, ["--flag", "fp16"],
            lambda out: float_check(out["Y"], a[:rows].astype(np.float64) @ b)))

        def torch_refs():
            dev = torch.device("cuda")
            ta, tb = torch.from_numpy(aq).to(dev), torch.from_numpy(bq).to(dev).t().contiguous().t()
            got = torch._int_mm(ta[:rows], tb).double().cpu().numpy()
            exact_sums = aq[:rows].astype(np.float64) @ bq.astype(np.float64)
            ha, hb = torch.from_numpy(a).to(dev), torch.from_numpy(b.astype(np.float16)).to(dev)
            return {"cublaslt_int8_int_mm": {"exact": bool(np.array_equal(got, exact_sums)), **torch_time(args, lambda: torch._int_mm(ta, tb))},
                    "cublas_fp16_matmul": torch_time(args, lambda: torch.matmul(ha, hb))}

        if torch is not None and torch.cuda.is_available():
            say(f"layers {shape}: torch._int_mm, torch.matmul fp16")
            guarded(case, "torch", torch_refs)
        part["products"][shape] = case


def norm_island_model(rows, length, data):
    """BERT's `DQ(a) + bias + DQ(r) -> LayerNormalization -> Q` on int8 inputs, int8 levels out."""
    import onnx
    from onnx import TensorProto, helper

    f32, i8 = TensorProto.FLOAT, TensorProto.INT8
    vec = lambda name: helper.make_tensor(name, f32, [length], data[name].astype(np.float32).tobytes(), raw=True)
    init = [helper.make_tensor(n, f32, [], [float(data[n])]) for n in ("sa", "sr", "sy")]
    init += [helper.make_tensor("z", i8, [], [0]), vec("bias"), vec("gamma"), vec("beta")]
    nodes = [helper.make_node("DequantizeLinear", ["a", "sa", "z"], ["A"]), helper.make_node("Add", ["A", "bias"], ["B"]),
             helper.make_node("DequantizeLinear", ["r", "sr", "z"], ["R"]), helper.make_node("Add", ["B", "R"], ["S"]),
             helper.make_node("LayerNormalization", ["S", "gamma", "beta"], ["N"], axis=-1, epsilon=1e-12),
             helper.make_node("QuantizeLinear", ["N", "sy", "z"], ["Y"])]
    io = lambda name: helper.make_tensor_value_info(name, i8, [rows, length])
    graph = helper.make_graph(nodes, "norm_island", [io("a"), io("r")], [io("Y")], init)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)], ir_version=9)
    onnx.checker.check_model(model)
    return model


def norm_fp16_model(rows, length, gamma, beta):
    """An fp16 LayerNormalization of the same shape: the fp16 engine's layer."""
    import onnx
    from onnx import TensorProto, helper

    f16 = TensorProto.FLOAT16
    init = [helper.make_tensor(n, f16, [length], v.astype(np.float16).tobytes(), raw=True) for n, v in (("gamma", gamma), ("beta", beta))]
    io = lambda name: helper.make_tensor_value_info(name, f16, [rows, length])
    graph = helper.make_graph([helper.make_node("LayerNormalization", ["x", "gamma", "beta"], ["y"], axis=-1, epsilon=1e-12)],
                              "fp16_norm", [io("x")], [io("y")], init)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)], ir_version=9)
    onnx.checker.check_model(model)
    return model


def islands(args, kiln, part):
    """Each `ROWSxLEN` of --norm-rows: kiln's LayerNorm island against kiln's and PyTorch's fp16
    LayerNorm; the island's levels checked against the f64 reference's first."""
    rng = np.random.default_rng(1)
    part["norms"] = {}
    normalized = lambda t, g, b: (t - t.mean(1, keepdims=True)) / np.sqrt(t.var(1, keepdims=True) + 1e-12) * g + b
    for shape in [x for x in args.norm_rows.split(",") if x]:
        rows, length = (int(d) for d in shape.split("x"))
        check = min(args.check_rows_gemm, rows)
        a, r = (rng.integers(-127, 128, size=(rows, length), dtype=np.int8) for _ in range(2))
        data = {"sa": np.float32(0.05), "sr": np.float32(0.04), "bias": rng.uniform(-0.5, 0.5, length),
                "gamma": rng.uniform(0.7, 1.3, length), "beta": rng.uniform(-0.2, 0.2, length)}
        normed = normalized(a[:check] * float(data["sa"]) + data["bias"] + r[:check] * float(data["sr"]), data["gamma"], data["beta"])
        data["sy"] = np.float32(np.abs(normed).max() / 127)
        want = np.clip(np.rint(normed / float(data["sy"])), -128, 127)
        x = rng.standard_normal((rows, length), dtype=np.float32).astype(np.float16)
        case = {}
        guarded(case, "kiln_int8", lambda: layer_case(
            kiln, args, f"norm_{shape}", norm_island_model(rows, length, data), {"a": a, "r": r},
            ["--flag", "int8", "--flag", "fp16"], lambda out: levels_check(out["Y"], want)))
        guarded(case, "kiln_fp16", lambda: layer_case(
            kiln, args, f"norm16_{shape}", norm_fp16_model(rows, length, data["gamma"], data["beta"]), {"x": x}, ["--flag", "fp16"],
            lambda out: float_check(out["y"], normalized(x[:check].astype(np.float64), data["gamma"], data["beta"]))))

        def torch_ref():
            dev = torch.device("cuda")
            tx = torch.from_numpy(x).to(dev)
            g, b = (torch.from_numpy(data[n].astype(np.float16)).to(dev) for n in ("gamma", "beta"))
            return {"torch_fp16_layer_norm": torch_time(args, lambda: torch.nn.functional.layer_norm(tx, (length,), g, b, 1e-12))}

        if torch is not None and torch.cuda.is_available():
            guarded(case, "torch", torch_ref)
        part["norms"][shape] = case


def layers_part(args, kiln):
    part = {}
    products(args, kiln, part)
    islands(args, kiln, part)
    return part


def print_layers(part):
    """A line per case: each figure in µs (and TOP/s for products), kiln's checks, then errors."""
    ms = lambda c: (c.get("bench") or {}).get("ms") if isinstance(c, dict) else None
    torch_ms = lambda case, key: ((case.get("torch") or {}).get(key) or {}).get("median_ms")

    def line(kind, tag, case, figures, rate=None):
        text = "  ".join(f"{k} {1e3 * v:.1f} us" + (f" ({rate / v:.0f} TOP/s)" if rate else "") if v else f"{k} -" for k, v in figures.items())
        checks = [f"{k} {'ok' if case[k].get('correct') else 'WRONG'}" for k in ("kiln_int8", "kiln_fp16")
                  if isinstance(case.get(k), dict) and "error" not in case[k]]
        errors = [f"{k}: {case[k]['error'][:150]}" for k in ("kiln_int8", "kiln_fp16", "torch")
                  if isinstance(case.get(k), dict) and "error" in case[k]]
        kiln_ratio = fmt(ratio(ms(case.get("kiln_int8")), ms(case.get("kiln_fp16"))), ".2f")
        print(f"{kind:<7} {tag:<15} {text}  kiln int8/fp16 {kiln_ratio}x  [{', '.join(checks)}]" + "".join(f"\n          {e}" for e in errors))

    for tag, case in part.get("products", {}).items():
        line("product", tag, case, {"kiln int8": ms(case.get("kiln_int8")), "kiln fp16": ms(case.get("kiln_fp16")),
                                     "cuBLASLt int8": torch_ms(case, "cublaslt_int8_int_mm"), "cuBLAS fp16": torch_ms(case, "cublas_fp16_matmul")},
             case["tops_per_ms"])
    for tag, case in part.get("norms", {}).items():
        line("norm", tag, case, {"kiln island": ms(case.get("kiln_int8")), "kiln fp16 LayerNorm": ms(case.get("kiln_fp16")),
                                 "torch fp16": torch_ms(case, "torch_fp16_layer_norm")})


# ---------------------------------------------------------------------------------------------
# Driver


def need_cuda():
    if torch is None or not torch.cuda.is_available():
        raise RuntimeError("this part needs PyTorch with CUDA")


def versions(kiln_exe):
    found = {"python": sys.version.split()[0], "numpy": np.__version__}
    for module in ("torch", "torchvision", "transformers", "onnx", "onnxruntime", "sklearn"):
        try:
            found[module] = __import__(module).__version__
        except Exception:  # noqa: BLE001 - a missing module is recorded, not fatal
            found[module] = None
    try:
        found["kiln"] = subprocess.run([kiln_exe, "--version"], capture_output=True, text=True).stdout.strip()
    except OSError as e:
        found["kiln"] = error_text(e)
    if torch is not None and torch.cuda.is_available():
        found["device"] = torch.cuda.get_device_name()
    return found


def write_json(path, results):
    """Written after every part (atomically), so a run cut at the time limit keeps what it measured."""
    results["wall_s"] = elapsed_s()
    with open(path + ".tmp", "w") as f:
        json.dump(results, f, indent=1, default=lambda o: o.item() if hasattr(o, "item") else str(o))
    os.replace(path + ".tmp", path)


def fmt(value, spec=".3f", none="-"):
    return format(value, spec) if isinstance(value, (int, float)) else none


def print_table(results):
    parts = results["parts"]
    print("\n== kiln INT8 / FP8 baseline (issue #21); times are medians in ms, ratios are time ratios ==")
    for name in ("resnet50", "bert", "vit"):
        p = parts.get(name)
        if not p:
            continue
        if "error" in p or "skipped" in p:
            print(f"{name:<9} {p.get('error') or p.get('skipped')}"[:300])
            continue
        fp16, qdq, comp = p.get("kiln_fp16", {}), p.get("kiln_qdq", {}), p.get("torch_compile_fp16", {})
        r = p["ratios"]
        print(f"{name:<9} batch {p['batch']}: kiln fp16 {fmt((fp16.get('bench') or {}).get('ms'))}  "
              f"kiln Q/DQ {fmt((qdq.get('bench') or {}).get('ms'))}  torch.compile fp16 {fmt(comp.get('median_ms'))}  "
              f"Q/DQ/fp16 {fmt(r['kiln_qdq_over_kiln_fp16'], '.2f')}x  Q/DQ/compile "
              f"{fmt(r['kiln_qdq_over_torch_compile_fp16'], '.2f')}x")
        for label, case in (("kiln fp16", fp16), ("kiln Q/DQ", qdq)):
            if "error" in case:
                print(f"          {label}: {case['error'][:200]}")
            for t in (case.get("profile") or {}).get("by_tactic", []):
                print(f"          {label} layers: {t['us']:8.1f} us in {t['layers']:3d}  {t['tactic']}")
        if "vs_ort_qdq" in qdq:
            print(f"          Q/DQ rel L2: kiln vs onnxruntime {qdq['vs_ort_qdq']['rel_l2']:.2e} "
                  f"(max abs {qdq['vs_ort_qdq']['max_abs']:.2e}), kiln vs fp32 {qdq['vs_torch_fp32']['rel_l2']:.2e}, "
                  f"onnxruntime vs fp32 {p['ort_qdq_vs_torch_fp32']['rel_l2']:.2e}  "
                  f"{'ok' if qdq['correct'] else 'OUTSIDE TIER'}")
    d = parts.get("digits")
    if d and "checks" in d:
        acc = lambda case: fmt(100 * case["accuracy"], ".1f") + "%" if "accuracy" in case else "error"
        print(f"digits    reference {100 * d['reference_accuracy']:.1f}%  kiln f32 {acc(d['kiln_f32'])}  "
              + "  ".join(f"int8 {m} {acc(d['kiln_int8_' + m])}" for m in ("entropy", "minmax", "percentile")))
        print("          checks: " + ", ".join(f"{k} {'ok' if v else 'FAIL'}" for k, v in d["checks"].items()))
    elif d:
        print(f"digits    {d.get('error') or d.get('skipped')}"[:300])
    g = parts.get("gemm")
    if g and "ratios" in g:
        t = g["torch"]
        for label, key in (("cuBLASLt int8 _int_mm", "cublaslt_int8_int_mm"),
                           ("cuBLASLt fp8 _scaled_mm", "cublaslt_fp8_scaled_mm"),
                           ("cuBLAS fp16 matmul", "cublas_fp16_matmul")):
            case = t.get(key, {})
            print(f"gemm {g['n']}^3  {label:<24} {fmt(case.get('median_ms')):>9} ms "
                  f"{fmt(case.get('tops'), '.1f'):>8} TOP/s" + (f"  {case['error'][:150]}" if "error" in case else ""))
        for kind in ("int8", "fp8"):
            case, label = g[f"kiln_qdq_{kind}"], f"kiln {kind} Q/DQ"
            if "error" in case:
                print(f"gemm {g['n']}^3  {label:<24} error: {case['error'][:200]}")
                continue
            print(f"gemm {g['n']}^3  {label:<24} {fmt(case['bench']['ms']):>9} ms {fmt(case['tops'], '.1f'):>8} TOP/s"
                  f"  rel L2 {case['vs_reference']['rel_l2']:.1e}  kiln/cuBLASLt "
                  f"{fmt(g['ratios'][f'kiln_{kind}_over_cublaslt_{kind}'], '.2f')}x")
    elif g:
        print(f"gemm      {g.get('error') or g.get('skipped')}"[:300])
    if parts.get("layers"):
        print_layers(parts["layers"])


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--kiln", default=".gpu/bin/kiln")
    p.add_argument("--out", default=os.environ.get("OUT", "/tmp"))
    p.add_argument("--work", default="/tmp/kiln-quant", help="exports, engines and inputs (never the repository)")
    p.add_argument("--only", default=",".join(PARTS), help="comma-separated parts: " + ",".join(PARTS))
    p.add_argument("--backend", default="cuda", help="kiln's backend (cpu: a local smoke test of the kiln side)")
    p.add_argument("--seconds", type=float, default=3.0, help="kiln bench's measured duration")
    p.add_argument("--iterations", type=int, default=100, help="timed PyTorch iterations")
    p.add_argument("--batch-resnet", type=int, default=256)
    p.add_argument("--batch-bert", type=int, default=32)
    p.add_argument("--batch-vit", type=int, default=32)
    p.add_argument("--check-rows", type=int, default=8, help="rows checked against onnxruntime's CPU run")
    p.add_argument("--calib-batches", type=int, default=8, help="quantize_static's random calibration batches")
    p.add_argument("--calib-batch", type=int, default=8)
    p.add_argument("--qdq-ops", default="Conv,MatMul,Gemm", help="op types quantize_static quantizes")
    p.add_argument("--exporter", default="legacy", choices=["legacy", "dynamo"],
                   help="resnet50 / bert / vit: PyTorch's ONNX exporter (dynamo: the default since PyTorch 2.9)")
    p.add_argument("--digits-epochs", type=int, default=30)
    p.add_argument("--digits-calib-batch", type=int, default=64)
    p.add_argument("--gemm-size", type=int, default=8192)
    p.add_argument("--gemm-input-dtype", default="f16", choices=["f16", "f32"])
    p.add_argument("--check-rows-gemm", type=int, default=256, help="rows of each product checked against f32")
    p.add_argument("--products", default="4096x768x768,4096x768x3072,4096x3072x768",
                   help="part layers: MxKxN of each INT8 product (default BERT-base b32's)")
    p.add_argument("--norm-rows", default="4096x768", help="part layers: ROWSxLEN of each LayerNorm island")
    p.add_argument("--layer-profile", action="store_true",
                   help="after each kiln bench, each layer timed alone (kiln bench --export-profile): the largest tactics printed, every layer in quant.json")
    p.add_argument("--qdq-only", action="store_true",
                   help="resnet50 / bert / vit: the Q/DQ engine only, no kiln fp16 or torch.compile peer (for kernel_ab.sh;"
                        " no ratio is reported)")
    p.add_argument("--deadline-s", type=float, default=570,
                   help="skip a part that would not end before this many seconds (0: no limit)")
    args = p.parse_args()
    parts = [x for x in args.only.split(",") if x]
    unknown = set(parts) - set(PARTS)
    if unknown:
        p.error(f"unknown parts {sorted(unknown)}; choose from {','.join(PARTS)}")
    args.kiln = os.path.abspath(args.kiln)
    os.makedirs(args.work, exist_ok=True)
    os.makedirs(args.out, exist_ok=True)
    out_json = os.path.join(args.out, "quant.json")
    log = open(os.path.join(args.out, "quant.log"), "a")
    kiln = Kiln(args.kiln, args.backend, args.work, log, args.deadline_s)
    results = {"schema": "kiln-quant/1", "started": datetime.datetime.now().isoformat(timespec="seconds"),
               "args": vars(args), "versions": versions(args.kiln), "parts": {}}
    say(f"parts {','.join(parts)} on {results['versions'].get('device', args.backend)}; figures -> {out_json}")
    runners = {"resnet50": lambda: qdq_part(args, kiln, "resnet50"), "bert": lambda: qdq_part(args, kiln, "bert"),
               "vit": lambda: qdq_part(args, kiln, "vit"),
               "digits": lambda: digits_part(args, kiln), "gemm": lambda: gemm_part(args, kiln),
               "layers": lambda: layers_part(args, kiln)}
    for name in parts:
        left = args.deadline_s - elapsed_s()
        if args.deadline_s and left < PART_ESTIMATE_S[name]:
            results["parts"][name] = {"skipped": f"{left:.0f} s left of --deadline-s, the part takes about "
                                                 f"{PART_ESTIMATE_S[name]} s; run it with --only {name}"}
            say(f"{name}: skipped ({left:.0f} s left)")
            continue
        say(f"== {name}")
        t0 = time.perf_counter()
        try:
            results["parts"][name] = runners[name]()
        except Exception as e:  # noqa: BLE001 - one failing part must not hide the others
            say(f"{name}: FAILED {error_text(e)[:500]}")
            results["parts"][name] = {"error": error_text(e)}
        results["parts"][name]["wall_s"] = time.perf_counter() - t0
        if torch is not None and torch.cuda.is_available():  # the next part starts with the GPU's memory free
            torch._dynamo.reset()
            torch.cuda.empty_cache()
        write_json(out_json, results)
        say(f"{name}: done in {results['parts'][name]['wall_s']:.0f} s")
    write_json(out_json, results)
    print_table(results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
