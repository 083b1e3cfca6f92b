#!/usr/bin/env python3
"""kiln against PyTorch eager and torch.compile over ~38 models at realistic sizes, on one GPU.

    perf.py run    --kiln .gpu/bin/kiln --work /tmp/perf [--filter REGEX] [--exporters legacy,dynamo]
                   [--batches throughput,1] [--seconds 2] [--budget S] [--modes eager,compile,compile_ro]
                   [--redo] [--keep-engines] [--profile] [--shard K/N]
    perf.py report --work /tmp/perf --out benches/zoo/PERF.md [--device NAME]
    perf.py list   [--filter REGEX] [--shard K/N]

Per model (random weights, seed 0; torchvision, timm and transformers at the sizes people run
them) and per exporter (the zoo's two, see export_case.py) and batch:
  1. the model is exported once (DIR/<model>__<exporter>/model.onnx, dynamic batch);
  2. PyTorch fp32 on CUDA gives the reference; PyTorch fp16 (channels_last for image models) its
     own error vs that reference, and PyTorch eager fp16, torch.compile (default mode) and
     torch.compile(mode="reduce-overhead") are timed with CUDA events (medians). Both exporters
     share these figures (DIR/_torch/<model>/b<B>.json): it is the same PyTorch work;
  3. kiln builds an fp16 engine for exactly that batch, runs it, and is timed (`kiln bench`: GPU
     compute median) only if its output is right: finite, rel L2 vs PyTorch fp32 ≤ max(3 × PyTorch
     fp16's own error, 1e-2);
  4. ratios = PyTorch median ÷ kiln GPU compute median (higher: kiln faster). The headline ones:
     vs torch.compile (default) at the model's throughput batch, vs reduce-overhead at batch 1.

Every step is resumable (DIR/<case>/result_b<B>.json ends a case × batch) and --budget S stops
starting work after S seconds, so a run can be split into device commands of at most 10 minutes.
See README.md, "Performance".
"""

import argparse
import contextlib
import datetime
import gc
import math
import os
import re
import statistics
import sys
import time
import traceback
from dataclasses import dataclass
from typing import Callable

import jsonio
from jsonio import read_json

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "gpu"))  # harness.py: the CUDA-event timing
sys.dont_write_bytecode = True  # no __pycache__ in the repository

# numpy, torch and the zoo's modules (which import numpy) are imported inside the functions that
# need them: `list`, `report` and --help work on a machine without them.

EXPORTERS = ("legacy", "dynamo")
# PyTorch's three timings: mode name -> torch.compile mode (None: eager, not compiled).
MODES = {"eager": None, "compile": "default", "compile_ro": "reduce-overhead"}
SEQUENCE = 128
WARMUP_S = 1.0  # PyTorch warm-up before timing (compilation happens before it, on the first call)
MIN_ITERATIONS, MAX_ITERATIONS = 20, 3000
BUILD_TIMEOUT_S, RUN_TIMEOUT_S, BENCH_EXTRA_S = 300, 120, 120
KILN_WARMUP_MS = 300
# A kiln command started before the budget ran out may go on this long after it; cut off later, its
# job is left unrecorded (perf.sh's hard limit is the budget plus a little more than this).
GRACE_S = 120
TOLERANCE_FLOOR = 1e-2
SLOW_RATIO = 0.9  # the report counts the cases where kiln is this much slower than torch.compile or worse


# ---------------------------------------------------------------- the models

@dataclass(frozen=True)
class Entry:
    name: str  # "<family>.<model>", e.g. "tv.resnet50"
    kind: str  # "image" (one 3-channel square input) or "text" (input_ids, attention_mask)
    batch: int  # the throughput batch
    build: Callable  # () -> torch module with random weights
    size: int  # image side, or text sequence length
    vocab: int = 0  # text: token ids are drawn from [3, vocab) (no special tokens: RoBERTa pads with 1)

    output_names = ("output",)

    @property
    def input_names(self):
        return ("input",) if self.kind == "image" else ("input_ids", "attention_mask")

    def inputs(self, batch):
        """Fixed inputs (default_rng(0)) as numpy arrays; text masks are all ones."""
        import numpy as np

        rng = np.random.default_rng(0)
        if self.kind == "image":
            return [rng.standard_normal((batch, 3, self.size, self.size), dtype=np.float32)]
        ids = rng.integers(3, self.vocab, size=(batch, self.size), dtype=np.int64)
        return [ids, np.ones_like(ids)]

    def describe(self):
        return f"3x{self.size}x{self.size}" if self.kind == "image" else f"sequence {self.size}"


def _tv(name, **kwargs):
    def build():
        import torchvision

        return torchvision.models.get_model(name, weights=None, **kwargs)

    return build


def _timm(name):
    def build():
        import timm

        return timm.create_model(name, pretrained=False)

    return build


def _hf(model_cls, config, text=True):
    """A transformers model built from `config(transformers)` (its default attention, SDPA where the
    model has it, as users run it), returning last_hidden_state alone: one output keeps the export
    and the comparison simple. Text models take (input_ids, attention_mask), image ones pixels."""

    def build():
        import torch
        import transformers

        inner = getattr(transformers, model_cls)(config(transformers))

        class TextEncoder(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.inner = inner

            def forward(self, input_ids, attention_mask):
                kw = {"use_cache": False} if hasattr(self.inner.config, "use_cache") else {}
                return self.inner(input_ids=input_ids, attention_mask=attention_mask, **kw).last_hidden_state

        class ImageEncoder(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.inner = inner

            def forward(self, pixel_values):
                return self.inner(pixel_values=pixel_values).last_hidden_state

        return (TextEncoder if text else ImageEncoder)()

    return build


def _image(name, build, batch, size=224):
    return Entry(name, "image", batch, build, size)


def _text(name, model_cls, config, vocab, batch=32):
    return Entry(name, "text", batch, _hf(model_cls, config), SEQUENCE, vocab)


def models():
    """Every model, in report order. Throughput batches: 128 for the small CNNs, 64 for the larger
    ones and the vision transformers, 32 for text (sequence 128) and the largest inputs."""
    tv, tm = _tv, _timm
    return [
        _image("tv.resnet18", tv("resnet18"), 128),
        _image("tv.resnet50", tv("resnet50"), 128),
        _image("tv.resnext50_32x4d", tv("resnext50_32x4d"), 64),
        _image("tv.wide_resnet50_2", tv("wide_resnet50_2"), 64),
        _image("tv.densenet121", tv("densenet121"), 64),
        _image("tv.mobilenet_v2", tv("mobilenet_v2"), 128),
        _image("tv.mobilenet_v3_large", tv("mobilenet_v3_large"), 128),
        _image("tv.efficientnet_b0", tv("efficientnet_b0"), 128),
        _image("tv.efficientnet_b3", tv("efficientnet_b3"), 64, 300),
        _image("tv.efficientnet_v2_s", tv("efficientnet_v2_s"), 32, 384),
        _image("tv.regnet_y_1_6gf", tv("regnet_y_1_6gf"), 128),
        _image("tv.convnext_tiny", tv("convnext_tiny"), 64),
        _image("tv.vgg16_bn", tv("vgg16_bn"), 64),
        _image("tv.squeezenet1_1", tv("squeezenet1_1"), 128),
        _image("tv.shufflenet_v2_x1_0", tv("shufflenet_v2_x1_0"), 128),
        _image("tv.mnasnet1_0", tv("mnasnet1_0"), 128),
        _image("tv.googlenet", tv("googlenet", aux_logits=False, init_weights=True), 128),
        _image("tv.inception_v3", tv("inception_v3", aux_logits=False, init_weights=True), 64, 299),
        _image("tv.vit_b_16", tv("vit_b_16"), 64),
        _image("tv.swin_t", tv("swin_t"), 64),
        _image("tv.maxvit_t", tv("maxvit_t"), 64),
        _image("timm.deit_small_patch16_224", tm("deit_small_patch16_224"), 128),
        _image("timm.convnextv2_tiny", tm("convnextv2_tiny"), 64),
        _image("timm.efficientformer_l1", tm("efficientformer_l1"), 128),
        _image("timm.levit_128s", tm("levit_128s"), 128),
        _image("timm.mobilevitv2_100", tm("mobilevitv2_100"), 128, 256),
        _image("timm.resnet50d", tm("resnet50d"), 128),
        _image("timm.regnetx_016", tm("regnetx_016"), 128),
        _image("timm.repvgg_a2", tm("repvgg_a2"), 128),
        _image("timm.cait_xxs24_224", tm("cait_xxs24_224"), 64),
        _text("hf.bert_base", "BertModel", lambda t: t.BertConfig(), 30522),
        _text("hf.distilbert_base", "DistilBertModel", lambda t: t.DistilBertConfig(), 30522),
        _text("hf.roberta_base", "RobertaModel", lambda t: t.RobertaConfig(), 50265),
        _text("hf.gpt2", "GPT2Model", lambda t: t.GPT2Config(), 50257),
        _text("hf.t5_small_encoder", "T5EncoderModel", lambda t: t.T5Config(
            vocab_size=32128, d_model=512, d_kv=64, d_ff=2048, num_layers=6, num_heads=8), 32128),
        _text("hf.albert_base", "AlbertModel", lambda t: t.AlbertConfig(
            embedding_size=128, hidden_size=768, num_attention_heads=12, intermediate_size=3072), 30000),
        _text("hf.electra_base", "ElectraModel", lambda t: t.ElectraConfig(
            embedding_size=768, hidden_size=768, num_attention_heads=12, intermediate_size=3072), 30522),
        _image("hf.vit_base", _hf("ViTModel", lambda t: t.ViTConfig(), text=False), 64),
    ]


def select(filter_rx, shard=None):
    """The models matching `filter_rx`; with `shard` "K/N", every N-th of them from the K-th (one
    GPU's part when perf.sh spreads a run over the GPUs of one machine)."""
    rx = re.compile(filter_rx) if filter_rx else None
    chosen = [e for e in models() if rx is None or rx.search(e.name)]
    if not shard:
        return chosen
    k, n = parse_shard(shard)
    return chosen[k::n]


def parse_shard(text):
    try:
        k, n = (int(x) for x in text.split("/"))
    except ValueError:
        k, n = -1, 0
    if not 0 <= k < n:
        sys.exit(f"perf: --shard wants K/N with 0 <= K < N, not `{text}`")
    return k, n


def batches_of(entry, spec):
    """--batches tokens (`throughput` = the entry's throughput batch, or a number), deduplicated."""
    out = []
    for token in spec.split(","):
        b = entry.batch if token.strip() == "throughput" else int(token)
        if b not in out:
            out.append(b)
    return out


# ---------------------------------------------------------------- files

def case_dir(work, model, exporter):
    return os.path.join(work, f"{model}__{exporter}")


def torch_dir(work, model):
    return os.path.join(work, "_torch", model)


def result_path(work, model, exporter, batch):
    return os.path.join(case_dir(work, model, exporter), f"result_b{batch}.json")


def write_json(path, obj):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    jsonio.write_json(path, obj)


def say(*args):
    print(*args, flush=True)


def one_line(e):
    import export_case

    return export_case._one_line(e)


# ---------------------------------------------------------------- PyTorch: model, export

def build_model(entry):
    """The module in eval mode as the zoo makes it: seed 0, zero-initialised parameters redrawn from
    N(0, 0.02²), BatchNorm statistics from one train-mode pass (random init statistics let deep
    nets overflow fp16)."""
    import torch
    import export_case

    torch.manual_seed(0)
    module = entry.build().eval()
    export_case.redraw(module)
    export_case.calibrate_batchnorm(module, [torch.from_numpy(x) for x in entry.inputs(2)])
    return module.eval()


@contextlib.contextmanager
def logged(path):
    """Python-level output (the exporters' progress and warnings) into the case's export.log."""
    with open(path, "a") as log, contextlib.redirect_stdout(log), contextlib.redirect_stderr(log):
        yield


def export_to(module, entry, exporter, batch, dynamic, path, meta):
    """One export with the zoo's code (export_case._export): legacy opset 17 with dynamic_axes, or
    dynamo with a torch.export batch Dim (retried with Dim.AUTO); example inputs of `batch`."""
    import torch
    import export_case
    import registry

    names, outs = list(entry.input_names), list(entry.output_names)
    inputs = tuple(torch.from_numpy(x) for x in entry.inputs(batch))
    axes = {n: {0: "batch"} for n in names + outs}
    case = registry.ModelCase(module, inputs, names, outs, axes, None)
    with logged(os.path.join(os.path.dirname(path), "export.log")), torch.no_grad():
        try:
            export_case._export(case, exporter, dynamic, path, meta)
        finally:
            # The zoo turns the MHA fast path off for export; PyTorch is timed with its default.
            torch.backends.mha.set_fastpath_enabled(True)


def onnx_io(path):
    """The graph's inputs and outputs ({name, dims}; a dim is a string where symbolic)."""
    import export_case

    s = export_case._onnx_summary(path)
    return s["onnx_inputs"], s["onnx_outputs"]


def export_case_files(work, entry, module, exporter, batches):
    """Exports once per model × exporter (export.json records how), with a dynamic batch at example
    batch 2. Where the batch is not symbolic in the result (dynamo: the strict Dim and Dim.AUTO both
    failed, or AUTO specialized it), one static export per batch, model_b<B>.onnx."""
    folder = case_dir(work, entry.name, exporter)
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, "export.json")
    info = read_json(path)
    if info is None:
        info = {"exporter": exporter, "shape": "dynamic", "static_errors": {}}
        start = time.perf_counter()
        try:
            export_to(module, entry, exporter, 2, True, os.path.join(folder, "model.onnx"), info)
            if info.get("dynamic_fallback"):
                info["shape"] = info["dynamic_fallback"]
        except Exception as e:
            if exporter != "dynamo":
                info["error"] = f"PyTorch export failed: {one_line(e)}"
            else:  # static exports per batch below
                info.update(shape="static", dynamic_error=one_line(e))
        info["seconds"] = time.perf_counter() - start
        exported = "error" not in info and info["shape"] != "static"
        inputs = onnx_io(os.path.join(folder, "model.onnx"))[0] if exported else []
        info["batch_symbolic"] = exported and all(isinstance(i["dims"][0], str) for i in inputs if i["dims"])
        if exported and not info["batch_symbolic"]:
            info["shape"] += " (batch specialized)"
    if "error" not in info and not info["batch_symbolic"]:
        for b in batches:
            if str(b) in info["static_errors"] or os.path.exists(os.path.join(folder, f"model_b{b}.onnx")):
                continue
            try:
                export_to(module, entry, exporter, b, False, os.path.join(folder, f"model_b{b}.onnx"), {})
                info["static_errors"][str(b)] = None
            except Exception as e:
                info["static_errors"][str(b)] = f"PyTorch static export failed: {one_line(e)}"
    write_json(path, info)
    return info


def export_done(work, entry, exporter, batches):
    """Whether every batch has its ONNX file (or a recorded export failure)."""
    info = read_json(os.path.join(case_dir(work, entry.name, exporter), "export.json"))
    if info is None:
        return False
    return "error" in info or info["batch_symbolic"] or all(str(b) in info["static_errors"] for b in batches)


def onnx_for(info, batch):
    """(file name of the model to build for `batch`, None) or (None, why there is none)."""
    if info.get("error"):
        return None, info["error"]
    if info["batch_symbolic"]:
        return "model.onnx", None
    why = info["static_errors"].get(str(batch))
    return (None, why) if why else (f"model_b{batch}.onnx", None)


# ---------------------------------------------------------------- PyTorch: reference and timings

def timed(fn, seconds):
    """harness.py's CUDA-event timing: a warm-up and a short probe, then enough iterations to fill
    about `seconds` (bounded), summarized (median, min, p90)."""
    import harness

    probe = statistics.median(harness.cuda_times_ms(fn, WARMUP_S, 5))
    n = int(min(MAX_ITERATIONS, max(MIN_ITERATIONS, seconds * 1000 / max(probe, 1e-3))))
    return harness.summary(harness.cuda_times_ms(fn, 0, n))


def time_mode(model, inputs, mode, seconds):
    """One PyTorch timing (eager, or a fresh torch.compile of the fp16 model); failures recorded.
    Dynamo's caches are reset first, so each compile sees one batch (static shapes) and one mode."""
    import torch

    torch._dynamo.reset()
    try:
        fn = model if MODES[mode] is None else torch.compile(model, mode=MODES[mode])
        with torch.no_grad():
            start = time.perf_counter()
            fn(*inputs)
            torch.cuda.synchronize()
            first = time.perf_counter() - start
            return dict(timed(lambda: fn(*inputs), seconds), first_call_s=first)
    except Exception as e:  # a compile failure is a result, not the end of the run
        return {"error": one_line(e)}
    finally:
        torch._dynamo.reset()
        torch.cuda.empty_cache()


def rel_l2(actual, reference):
    import common

    c = common.compare(actual, reference)
    return c.get("rel_l2", float("inf")) if "error" not in c else float("inf")


def torch_pass(work, entry, module, batches, modes, seconds, deadline):
    """PyTorch's figures for the batches that lack them, into _torch/<model>/b<B>.json (written after
    each step, so a budget cut keeps what was done): the fp32 reference (ref_b<B>.npz), PyTorch
    fp16's own error, the timings. fp32 runs without TF32 (see cmd_run)."""
    import numpy as np
    import torch

    folder = torch_dir(work, entry.name)
    dev = torch.device("cuda")
    model = module.to(dev)
    with torch.no_grad():
        for b in batches:
            path = os.path.join(folder, f"b{b}.json")
            rec = read_json(path, {})
            if "reference" in rec:
                continue
            try:
                out = model(*[torch.from_numpy(x).to(dev) for x in entry.inputs(b)]).float().cpu().numpy()
                os.makedirs(folder, exist_ok=True)
                np.savez(os.path.join(folder, f"ref_b{b}.npz"), output=out)
                rec["reference"] = {"shape": list(out.shape), "finite": bool(np.isfinite(out).all()),
                                    "rms": float(np.sqrt(np.mean(np.square(out.astype(np.float64)))))}
            except Exception as e:
                rec["reference"] = {"error": one_line(e)}
            write_json(path, rec)
    # PyTorch's fastest inference setup: fp16, and channels_last for CNNs (tensor-core convolutions).
    model = model.half()
    if entry.kind == "image":
        model = model.to(memory_format=torch.channels_last)
    for b in batches:
        path = os.path.join(folder, f"b{b}.json")
        rec = read_json(path, {})
        inputs = [torch.from_numpy(x).to(dev) for x in entry.inputs(b)]
        inputs = [x.half() if x.is_floating_point() else x for x in inputs]
        if entry.kind == "image":
            inputs = [x.contiguous(memory_format=torch.channels_last) for x in inputs]
        if "fp16_rel_l2" not in rec:
            rec["fp16_rel_l2"] = None
            ref_path = os.path.join(folder, f"ref_b{b}.npz")
            try:
                with torch.no_grad():
                    out16 = model(*inputs).float().cpu().numpy()
                if os.path.exists(ref_path):
                    with np.load(ref_path) as f:
                        rec["fp16_rel_l2"] = rel_l2(out16, f["output"])
            except Exception as e:
                rec["fp16_error"] = one_line(e)
            write_json(path, rec)
        for mode in modes:
            if mode in rec:
                continue
            if deadline.left() <= 0:
                return
            rec[mode] = time_mode(model, inputs, mode, seconds)
            rec.update(device=torch.cuda.get_device_name(), torch=torch.__version__)
            write_json(path, rec)
            say(f"  {entry.name} b{b} torch {mode}: " + (f"{rec[mode]['median_ms']:.3f} ms" if "median_ms" in rec[mode]
                                                         else rec[mode]["error"][:150]))


def torch_done(work, entry, batch, modes):
    rec = read_json(os.path.join(torch_dir(work, entry.name), f"b{batch}.json"), {})
    return "reference" in rec and "fp16_rel_l2" in rec and all(m in rec for m in modes)


def free_gpu():
    import torch

    gc.collect()
    torch._dynamo.reset()
    torch.cuda.empty_cache()


# ---------------------------------------------------------------- kiln

class Deferred(Exception):
    """The budget ran out during a kiln command: its job is left unrecorded, for the next invocation."""


def run_kiln(cmd, limit, folder, log, deadline):
    """A kiln command in `folder` (so external data resolves beside the model), cut at `limit` seconds
    or when the budget's grace runs out (then Deferred). Returns None, or why it failed (kiln's
    `error:` line, or the timeout)."""
    import common

    allowed = min(limit, deadline.left() + GRACE_S)
    code, _, err, _ = common.run_process(cmd, allowed, cwd=folder, log=log)
    if code is None and allowed < limit:
        raise Deferred(" ".join(cmd[:2]))
    if code == 0:
        return None
    return f"timeout after {allowed:.0f} s" if code is None else common.first_error_line(err, code)


def feed_for(onnx_inputs, names, arrays):
    """The inputs keyed by the graph's names: by name, then by position among the unmatched (an
    exporter may rename inputs)."""
    given = dict(zip(names, arrays))
    unmatched = [n for n in names if n not in {i["name"] for i in onnx_inputs}]
    feed = {}
    for i in onnx_inputs:
        if i["name"] in given:
            feed[i["name"]] = given[i["name"]]
        elif unmatched:
            feed[i["name"]] = given[unmatched.pop(0)]
        else:
            raise ValueError(f"ONNX input `{i['name']}` matches no PyTorch input")
    return feed


def torch_fields(rec, modes):
    """The PyTorch figures a result carries: medians per mode, compile errors, fp16's own error."""
    out = {"torch_fp16_rel_l2": rec.get("fp16_rel_l2"), "torch_errors": {}}
    for mode in modes:
        m = rec.get(mode) or {}
        out[f"{mode}_ms"] = m.get("median_ms")
        if "error" in m:
            out["torch_errors"][mode] = m["error"]
    if "error" in rec.get("reference", {}):
        out["torch_errors"]["fp32 reference"] = rec["reference"]["error"]
    return out


def base_result(entry, exporter, batch):
    return {"model": entry.name, "exporter": exporter, "batch": batch, "kind": entry.kind,
            "throughput_batch": entry.batch, "correct": False}


def kiln_case(work, entry, exporter, batch, info, args, deadline):
    """Builds, checks and (if right) times kiln on one case × batch; returns the result."""
    import common
    import numpy as np

    folder = case_dir(work, entry.name, exporter)
    rec = read_json(os.path.join(torch_dir(work, entry.name), f"b{batch}.json"), {})
    res = dict(base_result(entry, exporter, batch), export_shape=info.get("shape"), **torch_fields(rec, args.modes))

    def failed(stage, error):
        res.update(stage=stage, error=error)
        return res

    model, why = onnx_for(info, batch)
    if why:
        return failed("export", why)
    ref_path = os.path.join(torch_dir(work, entry.name), f"ref_b{batch}.npz")
    if not os.path.exists(ref_path):
        return failed("pytorch", "no PyTorch fp32 reference: " + res["torch_errors"].get("fp32 reference", "?"))
    with np.load(ref_path) as f:
        reference = f["output"]
    onnx_inputs, onnx_outputs = onnx_io(os.path.join(folder, model))
    feed = feed_for(onnx_inputs, entry.input_names, entry.inputs(batch))
    inputs = f"in_b{batch}.npz"
    np.savez(os.path.join(folder, inputs), **feed)
    shapes = ",".join(f"{i['name']}:{'x'.join(map(str, feed[i['name']].shape))}"
                      for i in onnx_inputs if any(isinstance(d, str) for d in i["dims"]))
    profile = ["--min-shapes", shapes, "--opt-shapes", shapes, "--max-shapes", shapes] if shapes else []
    engine, outputs, log = f"engine_b{batch}.kiln", f"out_b{batch}.npz", os.path.join(folder, f"kiln_b{batch}.log")
    if os.path.exists(log):
        os.remove(log)
    try:
        start = time.perf_counter()
        error = run_kiln([args.kiln, "build", model, "-o", engine, "--backend", "cuda", "--flag", "fp16", *profile,
                          "--timing-cache", os.path.join(work, "timing.cache")], BUILD_TIMEOUT_S, folder, log, deadline)
        res["build_s"] = time.perf_counter() - start
        if error:
            return failed("build", error)
        error = run_kiln([args.kiln, "run", engine, "--inputs", inputs, "--save-outputs", outputs],
                         RUN_TIMEOUT_S, folder, log, deadline)
        if error:
            return failed("run", error)
        name = onnx_outputs[0]["name"]
        with np.load(os.path.join(folder, outputs)) as f:
            if name not in f.files:
                return failed("run", f"output `{name}` missing from kiln's outputs ({f.files})")
            c = common.compare(f[name], reference)
        own = res["torch_fp16_rel_l2"]
        res["tolerance"] = max(3 * own, TOLERANCE_FLOOR) if own is not None and math.isfinite(own) else TOLERANCE_FLOOR
        res["kiln_rel_l2"] = c.get("rel_l2")
        if "error" in c or not c["rel_l2"] <= res["tolerance"]:
            why = c.get("error") or f"rel L2 {c['rel_l2']:.3g} vs PyTorch fp32 > tolerance {res['tolerance']:.3g}"
            return failed("check", f"{why}: not timed")
        res["correct"] = True
        report = f"bench_b{batch}.json"
        # The per-layer profile runs after the timed runs (it does not change the figure) and
        # lands in the same JSON report, under "profile".
        layers = ["--dump-profile"] if args.profile else []
        error = run_kiln([args.kiln, "bench", engine, "--inputs", inputs, "--warmup-ms", str(KILN_WARMUP_MS),
                          "--duration-s", str(args.seconds), "--json", report, *layers],
                         args.seconds + BENCH_EXTRA_S, folder, log, deadline)
        if error:
            return failed("bench", error)
        bench = read_json(os.path.join(folder, report), {})
    finally:  # the large per-batch files (a batch of 128 images is 77 MB): the disk is finite
        for name in [outputs] + ([] if args.keep_engines else [engine, inputs]):
            if os.path.exists(os.path.join(folder, name)):
                os.remove(os.path.join(folder, name))
    gpu = (bench.get("gpu_compute_ms") or {}).get("median")
    res["kiln_latency_ms"] = (bench.get("latency_ms") or {}).get("median")
    # PyTorch's inputs are already on the GPU: kiln's GPU compute time (no host copies) is the
    # like-for-like figure; host latency only where the backend reports no device times.
    res["kiln_ms"] = gpu or res["kiln_latency_ms"]
    res["kiln_ms_is"] = "gpu compute" if gpu else "host latency"
    res["cuda_graph"] = (bench.get("cuda_graph") or {}).get("last_run")
    for mode in args.modes:
        if res.get(f"{mode}_ms") and res["kiln_ms"]:
            res[f"vs_{mode}"] = res[f"{mode}_ms"] / res["kiln_ms"]
    return res


# ---------------------------------------------------------------- run

def run_model(work, entry, args, deadline):
    """One model: export and PyTorch work where missing (one build of the model), then kiln on each
    exporter × batch that has no result yet."""
    batches = batches_of(entry, args.batches)
    jobs = [(e, b) for e in args.exporters for b in batches
            if args.redo or not os.path.exists(result_path(work, entry.name, e, b))]
    if not jobs:
        return
    if args.redo:
        for b in batches:
            rec_path = os.path.join(torch_dir(work, entry.name), f"b{b}.json")
            if os.path.exists(rec_path):
                os.remove(rec_path)
    exporters = sorted({e for e, _ in jobs}, key=EXPORTERS.index)
    need_export = [e for e in exporters if not export_done(work, entry, e, batches)]
    need_torch = sorted({b for _, b in jobs if not torch_done(work, entry, b, args.modes)}, key=batches.index)
    if need_export or need_torch:
        say(f"{entry.name}: build" + (f", export {need_export}" if need_export else "")
            + (f", PyTorch batches {need_torch}" if need_torch else ""))
        try:
            module = build_model(entry)
        except Exception as e:
            traceback.print_exc()
            error = f"model construction failed: {one_line(e)}"
            for exporter, batch in jobs:
                write_json(result_path(work, entry.name, exporter, batch),
                           dict(base_result(entry, exporter, batch), stage="pytorch", error=error))
            return
        for exporter in need_export:
            start = time.perf_counter()
            info = export_case_files(work, entry, module, exporter, batches)
            say(f"  {entry.name} {exporter} export: {info['shape']} {time.perf_counter() - start:.0f} s "
                f"{info.get('error', '')[:150]}")
        if need_torch:
            torch_pass(work, entry, module, need_torch, args.modes, args.seconds, deadline)
        del module
        free_gpu()
    for exporter, batch in jobs:
        if deadline.left() <= 0 or not torch_done(work, entry, batch, args.modes):
            return  # the budget ran out: the rest next invocation
        info = read_json(os.path.join(case_dir(work, entry.name, exporter), "export.json"))
        try:
            res = kiln_case(work, entry, exporter, batch, info, args, deadline)
        except Deferred:
            raise
        except Exception as e:  # a harness problem on one case is that case's result
            traceback.print_exc()
            res = dict(base_result(entry, exporter, batch), stage="harness", error=one_line(e))
        write_json(result_path(work, entry.name, exporter, batch), res)
        ratios = ", ".join(f"{mode} ÷ kiln {res[f'vs_{mode}']:.2f}" for mode in args.modes if res.get(f"vs_{mode}"))
        say(f"  {entry.name} {exporter} b{batch}: " + (f"kiln {res['kiln_ms']:.3f} ms ({res['kiln_ms_is']}) {ratios}"
                                                      if res.get("kiln_ms") else res.get("error", "?")[:200]))


def cmd_run(args):
    import common
    import run_case
    import torch

    if not torch.cuda.is_available():
        sys.exit("perf: no CUDA device for PyTorch")
    args.kiln = os.path.abspath(args.kiln)
    if not os.access(args.kiln, os.X_OK):
        sys.exit(f"perf: no kiln binary at {args.kiln}")
    args.exporters = [e for e in args.exporters.split(",") if e]
    args.modes = [m for m in args.modes.split(",") if m]
    for bad in (set(args.exporters) - set(EXPORTERS)) | (set(args.modes) - set(MODES)):
        sys.exit(f"perf: unknown exporter or mode `{bad}`")
    work = os.path.abspath(args.work)
    os.makedirs(work, exist_ok=True)
    # kiln's CUDA libraries (benches/gpu/run.sh's path), for every kiln subprocess.
    os.environ.update(run_case.kiln_env("fp16"))
    # The fp32 reference without TF32; PyTorch's timings with cuDNN's autotuner (kiln times its
    # tactics too).
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cudnn.benchmark = True
    deadline = common.Deadline(args.budget)
    code, out, err, _ = common.run_process([args.kiln, "--version"], 30)
    info = {"kiln": args.kiln, "kiln_version": (out or err).strip(), "device": torch.cuda.get_device_name(),
            "torch": torch.__version__, "seconds": args.seconds, "date": datetime.datetime.now().isoformat()}
    write_json(os.path.join(work, "run_info.json"), info)
    entries = select(args.filter, args.shard)
    say(f"perf: {len(entries)} models, exporters {args.exporters}, batches {args.batches}, "
        f"{info['kiln_version']} on {info['device']} -> {work}")
    start = time.perf_counter()
    for entry in entries:
        if deadline.left() <= 0:
            break
        try:
            run_model(work, entry, args, deadline)
        except Deferred as e:
            say(f"perf: `{e}` cut short by the budget, left for the next invocation")
            break
        except Exception as e:  # a harness bug on one model must not stop the others
            traceback.print_exc()
            say(f"  {entry.name}: harness error {type(e).__name__}: {e}")
        finally:
            free_gpu()
    if deadline.left() <= 0:
        say("perf: budget reached; the same command again goes on where this one stopped")
    say(f"perf: {time.perf_counter() - start:.0f} s")


# ---------------------------------------------------------------- report

def load_results(work):
    order = {e.name: i for i, e in enumerate(models())}
    rows = []
    for name in sorted(os.listdir(work)) if os.path.isdir(work) else []:
        folder = os.path.join(work, name)
        if "__" not in name or not os.path.isdir(folder):
            continue
        for f in os.listdir(folder):
            if re.fullmatch(r"result_b\d+\.json", f):
                res = read_json(os.path.join(folder, f))
                if res:
                    rows.append(res)
    rows.sort(key=lambda r: (order.get(r["model"], len(order)), r["model"], EXPORTERS.index(r["exporter"]),
                             -r["batch"]))
    return rows


def geomean(values):
    values = [v for v in values if v and v > 0]
    return math.exp(sum(map(math.log, values)) / len(values)) if values else None


def _ms(x):
    return "-" if x is None else f"{x:.3f}"


def _x(x):
    return "-" if x is None else f"{x:.2f}×"


def _cell(text, n=140):
    text = " ".join(str(text).split()).replace("|", "\\|")
    return text if len(text) <= n else text[: n - 1] + "…"


def _ratio_line(label, rows, key):
    """`label`: geometric mean of rows' `key` ratio, overall and per exporter."""
    parts = []
    for exporter in (None,) + EXPORTERS:
        sub = [r[key] for r in rows if r.get(key) and (exporter is None or r["exporter"] == exporter)]
        g = geomean(sub)
        if g is not None:
            parts.append(f"{_x(g)} over {len(sub)}" + (f" {exporter}" if exporter else " cases"))
    return f"- **{label}**: " + ("; ".join(parts) if parts else "no correct case timed")


def summary_lines(rows):
    """The headline figures (the report's summary, also printed by `report`)."""
    timed_rows = [r for r in rows if r.get("kiln_ms")]
    through = [r for r in timed_rows if r["batch"] == r["throughput_batch"]]
    one = [r for r in timed_rows if r["batch"] == 1]
    slow = [r for r in through if r.get("vs_compile") and r["vs_compile"] < SLOW_RATIO]
    stages = {}
    for r in rows:
        if r.get("stage"):
            stages[r["stage"]] = stages.get(r["stage"], 0) + 1
    compile_failed = sorted({r["model"] for r in rows for m in ("compile", "compile_ro")
                             if m in (r.get("torch_errors") or {})})
    pairs = [p for p in dynamo_legacy(rows) if p["throughput"]]
    return [
        f"- results: {len(rows)} (model × exporter × batch) over {len({r['model'] for r in rows})} models; "
        f"kiln right: {sum(1 for r in rows if r.get('correct'))}, timed: {len(timed_rows)}; failures by stage: "
        + (", ".join(f"{k} {v}" for k, v in sorted(stages.items())) or "none"),
        _ratio_line("throughput batch, torch.compile (default) ÷ kiln", through, "vs_compile"),
        f"- below {SLOW_RATIO}× at the throughput batch: {len(slow)}"
        + (": " + ", ".join(f"{r['model']} {r['exporter']} {_x(r['vs_compile'])}" for r in slow) if slow else ""),
        _ratio_line("batch 1, torch.compile (reduce-overhead) ÷ kiln", one, "vs_compile_ro"),
        _ratio_line("throughput batch, PyTorch eager ÷ kiln", through, "vs_eager"),
        f"- kiln time, dynamo export ÷ legacy export, at the throughput batch: geometric mean "
        f"{_x(geomean([p['ratio'] for p in pairs]))} over {len(pairs)} models (above 1: kiln is slower on the "
        f"dynamo export)",
        f"- torch.compile failed on: {', '.join(compile_failed) or 'none'}",
    ]


def dynamo_legacy(rows):
    """Per model and batch where kiln timed both exports: kiln ms dynamo ÷ kiln ms legacy."""
    timed_rows = {(r["model"], r["batch"], r["exporter"]): r for r in rows if r.get("kiln_ms")}
    pairs = []
    for (model, batch, exporter), r in timed_rows.items():
        other = timed_rows.get((model, batch, "legacy"))
        if exporter == "dynamo" and other:
            pairs.append({"model": model, "batch": batch, "legacy": other["kiln_ms"], "dynamo": r["kiln_ms"],
                          "ratio": r["kiln_ms"] / other["kiln_ms"], "throughput": batch == r["throughput_batch"]})
    order = {e.name: i for i, e in enumerate(models())}
    return sorted(pairs, key=lambda p: (order.get(p["model"], len(order)), p["model"], -p["batch"]))


def _correct_cell(r):
    if r.get("kiln_rel_l2") is None:
        return "-"
    mark = "✓" if r.get("correct") else "✗"
    return f"{mark} {r['kiln_rel_l2']:.1e} {'≤' if r.get('correct') else '>'} {r['tolerance']:.0e}"


def _notes(r):
    notes = []
    if r.get("error"):
        notes.append(f"{r.get('stage', '?')}: {r['error']}")
    for mode, error in (r.get("torch_errors") or {}).items():
        notes.append(f"torch {mode}: {error}")
    if r.get("kiln_ms_is") == "host latency":
        notes.append("kiln: host latency (no GPU compute time)")
    if r.get("export_shape") not in (None, "dynamic"):
        notes.append(f"export: {r['export_shape']}")
    return _cell("; ".join(notes))


def _batch_cell(r):
    """The batch, bold where it is the model's throughput batch."""
    return f"**{r['batch']}**" if r["batch"] == r["throughput_batch"] else str(r["batch"])


def render(rows, info, device=None):
    L = ["# kiln vs PyTorch: GPU time over the perf models", ""]
    now = datetime.datetime.now().strftime("%Y-%m-%d %H:%M")
    L.append(f"- date: {now}; device: {device or info.get('device', '?')}")
    L.append(f"- kiln: {info.get('kiln_version', '?')}; torch {info.get('torch', '?')}; "
             f"{info.get('seconds', '?')} s of timing per figure")
    L += ["", "## Summary", ""] + summary_lines(rows) + [""]
    L.append("Made by `benches/zoo/perf.py` (see README.md, Performance). Each figure is a median: kiln's GPU "
             "compute time from `kiln bench` (fp16 engine built for exactly that batch; CUDA events around the "
             "compute, no host copies), PyTorch's per-call time with CUDA events (fp16, channels_last for image "
             "models; inputs already on the GPU). Ratios: PyTorch ÷ kiln, above 1 where kiln is faster; geometric "
             "means over the cases kiln timed, which are those where its output was right (rel L2 vs PyTorch fp32 "
             "≤ max(3 × PyTorch fp16's own error, 1e-2)). compile: `torch.compile(model)`; compile-RO: "
             "`mode=\"reduce-overhead\"` (CUDA graphs). Bold batch: the model's throughput batch.")
    L += ["", "## kiln time by exporter", "", "| model | batch | legacy ms | dynamo ms | dynamo ÷ legacy |",
          "|---|---:|---:|---:|---:|"]
    for p in dynamo_legacy(rows):
        L.append(f"| {p['model']} | {p['batch']} | {_ms(p['legacy'])} | {_ms(p['dynamo'])} | {p['ratio']:.2f} |")
    L += ["", "## All results", "",
          "| model | exporter | batch | kiln ms | eager ms | compile ms | compile-RO ms | compile ÷ kiln | "
          "RO ÷ kiln | correct (rel L2 vs fp32) | notes |",
          "|---|---|---:|---:|---:|---:|---:|---:|---:|---|---|"]
    for r in rows:
        L.append(f"| {r['model']} | {r['exporter']} | {_batch_cell(r)} | {_ms(r.get('kiln_ms'))} | "
                 f"{_ms(r.get('eager_ms'))} | {_ms(r.get('compile_ms'))} | {_ms(r.get('compile_ro_ms'))} | "
                 f"{_x(r.get('vs_compile'))} | {_x(r.get('vs_compile_ro'))} | {_correct_cell(r)} | {_notes(r)} |")
    return "\n".join(L) + "\n"


def cmd_report(args):
    work = os.path.abspath(args.work)
    rows = load_results(work)
    text = render(rows, read_json(os.path.join(work, "run_info.json"), {}), args.device)
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        f.write(text)
    for line in summary_lines(rows):
        say(line)
    say(f"report: {args.out}")


def cmd_list(args):
    for e in select(args.filter, args.shard):
        say(f"{e.name:32s} {e.kind:6s} throughput batch {e.batch:4d}  {e.describe()}")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)

    r = sub.add_parser("run", help="export, check and time every selected model")
    r.add_argument("--kiln", required=True, help="the kiln binary (e.g. .gpu/bin/kiln)")
    r.add_argument("--work", required=True, help="work folder: exports, engines, results (resumable)")
    r.add_argument("--filter", help="regex on model names (see `list`)")
    r.add_argument("--exporters", default="legacy,dynamo")
    r.add_argument("--batches", default="throughput,1", help="`throughput` (the model's) and/or numbers")
    r.add_argument("--seconds", type=float, default=2.0, help="timing per figure (kiln and each PyTorch mode)")
    r.add_argument("--budget", type=float, default=0, help="stop starting work after this many seconds (0: none)")
    r.add_argument("--modes", default=",".join(MODES), help="PyTorch timings: eager,compile,compile_ro")
    r.add_argument("--redo", action="store_true", help="time again what has results (exports are kept)")
    r.add_argument("--keep-engines", action="store_true",
                   help="keep DIR/<case>/engine_b<B>.kiln and in_b<B>.npz (for benches/gpu/profile.sh)")
    r.add_argument("--shard", help="K/N: every N-th selected model from the K-th (one GPU's part)")
    r.add_argument("--profile", action="store_true",
                   help="also profile each timed engine's layers (kiln bench --dump-profile): the per-layer "
                        "times go into DIR/<case>/bench_b<B>.json and the text into kiln_b<B>.log")
    r.set_defaults(fn=cmd_run)

    o = sub.add_parser("report", help="write the Markdown table and print the summary")
    o.add_argument("--work", required=True)
    o.add_argument("--out", required=True)
    o.add_argument("--device", default=None, help="device name for the header (default: the run's)")
    o.set_defaults(fn=cmd_report)

    l = sub.add_parser("list", help="the models")
    l.add_argument("--filter")
    l.add_argument("--shard")
    l.set_defaults(fn=cmd_list)

    args = p.parse_args()
    args.fn(args)


if __name__ == "__main__":
    main()
