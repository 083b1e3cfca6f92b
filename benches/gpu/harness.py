"""kiln's GPU benchmark harness: kiln against PyTorch eager and torch.compile, same GPU, same run.

Runs on the GPU machine (torch, torchvision and transformers there; no network needed). For each
model and batch it
  1. builds the model with random weights and exports it to ONNX (opset 17, dynamic batch);
  2. runs PyTorch in fp32 on fixed random inputs: the reference outputs;
  3. builds a kiln engine (`kiln build --flag fp16|bf16`), runs it on the same inputs
     (`kiln run --save-outputs`) and checks its outputs against the reference *before* timing;
  4. times kiln (`kiln bench --json`: GPU compute time when the backend reports it, else the
     host-measured latency), PyTorch eager and torch.compile (CUDA events around each
     iteration, warm-up first, medians);
  5. prints a table of ratios and writes every figure to JSON.

    python benches/gpu/harness.py --kiln .gpu/bin/kiln --out $OUT [--models resnet50,bert]
        [--batches 1,128] [--precision fp16] [--seconds 3]
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import numpy as np
import torch

SEQUENCE = 128


def resnet50():
    import torchvision

    model = torchvision.models.resnet50(weights=None).eval()
    return model, ["input"], ["logits"]


def bert_base():
    from transformers import BertConfig, BertModel

    class Encoder(torch.nn.Module):
        """BERT-base returning its last hidden state (one output keeps the export simple)."""

        def __init__(self):
            super().__init__()
            self.bert = BertModel(BertConfig(), add_pooling_layer=False)

        def forward(self, input_ids, attention_mask):
            return self.bert(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state

    return Encoder().eval(), ["input_ids", "attention_mask"], ["hidden"]


def vit_b16():
    """torchvision's ViT-B/16 (197 tokens, 12 heads of 64). Its classification head starts at zero
    (every output 0): drawn at random like the rest. Its attention's fused fast path does not
    export with the legacy exporter: off."""
    import torchvision

    torch.backends.mha.set_fastpath_enabled(False)
    model = torchvision.models.vit_b_16(weights=None).eval()
    torch.nn.init.normal_(model.heads.head.weight, std=0.02)
    return model, ["input"], ["logits"]


MODELS = {"resnet50": resnet50, "bert": bert_base, "vit": vit_b16}


def make_inputs(name, batch, rng):
    if name in ("resnet50", "vit"):
        return [rng.standard_normal((batch, 3, 224, 224), dtype=np.float32)]
    ids = rng.integers(0, 30522, size=(batch, SEQUENCE), dtype=np.int64)
    mask = np.ones((batch, SEQUENCE), dtype=np.int64)
    return [ids, mask]


def export(model, input_names, output_names, sample, path, exporter="legacy"):
    """ONNX with a dynamic batch: the legacy TorchScript exporter (opset 17), or the dynamo one
    (PyTorch's default since 2.9; its own opset, weights in `path`.data)."""
    args = tuple(torch.from_numpy(x) for x in sample)
    with torch.no_grad():
        if exporter == "dynamo":
            batch = torch.export.Dim("batch", min=1, max=1024)
            torch.onnx.export(model, args, path, input_names=input_names, output_names=output_names, dynamo=True,
                              external_data=True, dynamic_shapes=tuple({0: batch} for _ in input_names))
            return
        dynamic = {n: {0: "batch"} for n in input_names + output_names}
        torch.onnx.export(model, args, path, input_names=input_names, output_names=output_names,
                          dynamic_axes=dynamic, opset_version=17, dynamo=False)


def cuda_times_ms(fn, warmup_s, iterations):
    """Per-iteration CUDA-event times after a warm-up of `warmup_s` seconds (at least 5 calls)."""
    start = time.perf_counter()
    calls = 0
    while calls < 5 or time.perf_counter() - start < warmup_s:
        fn()
        calls += 1
    torch.cuda.synchronize()
    times = []
    for _ in range(iterations):
        begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        begin.record()
        fn()
        end.record()
        end.synchronize()
        times.append(begin.elapsed_time(end))
    return times


def summary(times):
    times = sorted(times)
    return {"median_ms": statistics.median(times), "min_ms": times[0], "p90_ms": times[int(0.9 * (len(times) - 1))],
            "n": len(times)}


def run(cmd, log):
    log.write("$ " + " ".join(cmd) + "\n")
    log.flush()
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    log.write(proc.stdout + "\n")
    log.flush()
    if proc.returncode != 0:
        raise RuntimeError(f"{cmd[1]} failed ({proc.returncode}): {proc.stdout[-2000:]}")
    return proc.stdout


def rel_l2(a, b):
    a, b = a.astype(np.float64), b.astype(np.float64)
    return float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-30))


def bench_one(args, name, batch, work, log):
    torch.manual_seed(0)
    model, input_names, output_names = MODELS[name]()
    rng = np.random.default_rng(0)
    inputs = make_inputs(name, batch, rng)
    onnx_path = os.path.join(work, f"{name}.onnx")
    if not os.path.exists(onnx_path):
        export(model, input_names, output_names, make_inputs(name, 2, rng), onnx_path)
    npz = os.path.join(work, f"{name}_b{batch}_in.npz")
    np.savez(npz, **dict(zip(input_names, inputs)))
    shapes = ",".join(f"{n}:{'x'.join(map(str, x.shape))}" for n, x in zip(input_names, inputs))

    dev = torch.device("cuda")
    model = model.to(dev)
    torch_in = [torch.from_numpy(x).to(dev) for x in inputs]
    with torch.no_grad():
        reference = model(*torch_in).float().cpu().numpy()
    low = torch.float16 if args.precision == "fp16" else torch.bfloat16
    low_model = model.to(low)
    low_in = [x.to(low) if x.is_floating_point() else x for x in torch_in]
    if name == "resnet50":
        # PyTorch's fastest CNN layout on tensor cores: the strongest peer, as ../shared/GPU.md timed it.
        low_model = low_model.to(memory_format=torch.channels_last)
        low_in = [x.contiguous(memory_format=torch.channels_last) for x in low_in]
    with torch.no_grad():
        torch_low_err = rel_l2(low_model(*low_in).float().cpu().numpy(), reference)

    # kiln: build once, check, then time.
    engine = os.path.join(work, f"{name}_b{batch}_{args.precision}.kiln")
    cache = os.path.join(work, "timing.cache")
    t0 = time.perf_counter()
    run([args.kiln, "build", onnx_path, "-o", engine, "--backend", args.backend, "--flag", args.precision,
         "--min-shapes", shapes, "--opt-shapes", shapes, "--max-shapes", shapes, "--timing-cache", cache], log)
    build_s = time.perf_counter() - t0
    out_npz = os.path.join(work, f"{name}_b{batch}_out.npz")
    run([args.kiln, "run", engine, "--inputs", npz, "--save-outputs", out_npz], log)
    kiln_out = np.load(out_npz)[output_names[0]]
    kiln_err = rel_l2(kiln_out, reference)
    # Reduced precision tier: within 3x PyTorch's own error at this precision, or 1e-2.
    correct = bool(np.isfinite(kiln_out).all() and kiln_err <= max(3 * torch_low_err, 1e-2))
    result = {"model": name, "batch": batch, "precision": args.precision, "build_s": build_s,
              "kiln_rel_l2_vs_torch_fp32": kiln_err, "torch_low_rel_l2_vs_fp32": torch_low_err, "correct": correct}
    if not correct:
        result["error"] = "kiln's outputs differ from PyTorch's beyond the tier; not timed"
        return result

    timings = {}
    for graph in ([True, False] if args.backend == "cuda" else [True]):
        out_json = os.path.join(work, f"{name}_b{batch}_bench_{'graph' if graph else 'nograph'}.json")
        cmd = [args.kiln, "bench", engine, "--inputs", npz, "--warmup-ms", "500", "--duration-s", str(args.seconds),
               "--json", out_json]
        run(cmd + ([] if graph else ["--no-cuda-graph"]), log)
        with open(out_json) as f:
            report = json.load(f)
        timings["kiln" if graph else "kiln_no_graph"] = report
    kiln = timings["kiln"]
    gpu = kiln.get("gpu_compute_ms")
    result["kiln_latency_median_ms"] = kiln["latency_ms"]["median"]
    result["kiln_gpu_compute_median_ms"] = gpu["median"] if isinstance(gpu, dict) else None
    result["kiln_h2d_median_ms"] = (kiln.get("h2d_ms") or {}).get("median") if isinstance(kiln.get("h2d_ms"), dict) else None
    result["kiln_cuda_graph"] = kiln.get("cuda_graph")
    if "kiln_no_graph" in timings:
        result["kiln_no_graph_latency_median_ms"] = timings["kiln_no_graph"]["latency_ms"]["median"]
    result["kiln_bench"] = timings

    with torch.no_grad():
        result["torch_eager"] = summary(cuda_times_ms(lambda: low_model(*low_in), 1.0, args.iterations))
        compiled = torch.compile(low_model)
        t0 = time.perf_counter()
        compiled(*low_in)
        result["torch_compile_s"] = time.perf_counter() - t0
        result["torch_compile"] = summary(cuda_times_ms(lambda: compiled(*low_in), 1.0, args.iterations))
    # Device-resident comparison: PyTorch's inputs are already on the GPU, so kiln's GPU compute
    # time (no host transfers) is the like-for-like figure when the backend reports it.
    kiln_ms = result["kiln_gpu_compute_median_ms"] or result["kiln_latency_median_ms"]
    result["kiln_compared_ms"] = kiln_ms
    result["kiln_compared_as"] = "gpu compute" if result["kiln_gpu_compute_median_ms"] else "host latency (incl. H2D/D2H)"
    result["speedup_vs_compile"] = result["torch_compile"]["median_ms"] / kiln_ms
    result["speedup_vs_eager"] = result["torch_eager"]["median_ms"] / kiln_ms
    result["kiln_latency_vs_compile"] = result["kiln_latency_median_ms"] / result["torch_compile"]["median_ms"]
    return result


def matmul_bench(args, log):
    """kiln's MatrixMultiply layer against cuBLASLt at 8192^3 (the cuda GPU test binary's bench)."""
    exe = args.gpu_tests
    if not exe or not os.path.exists(exe):
        return {"skipped": f"no cuda GPU test binary at `{exe}`"}
    env = dict(os.environ, KILN_CUDA_BENCH="1")
    proc = subprocess.run([exe, "bench", "--nocapture"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          env=env)
    log.write(proc.stdout)
    return {"lines": [l for l in proc.stdout.splitlines() if l.startswith("BENCH")], "exit": proc.returncode}


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--kiln", required=True)
    p.add_argument("--out", default=os.environ.get("OUT", "/tmp"))
    p.add_argument("--work", default="/tmp/kiln-bench")
    p.add_argument("--models", default="resnet50,bert")
    p.add_argument("--batches", default="1,128")
    p.add_argument("--bert-batches", default="1,32")
    p.add_argument("--precision", default="fp16", choices=["fp16", "bf16"])
    p.add_argument("--backend", default="cuda")
    p.add_argument("--seconds", type=float, default=3.0)
    p.add_argument("--iterations", type=int, default=100)
    p.add_argument("--gpu-tests", default="")
    args = p.parse_args()
    os.makedirs(args.work, exist_ok=True)
    os.makedirs(args.out, exist_ok=True)
    log = open(os.path.join(args.out, "harness.log"), "a")
    results = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "runs": []}
    for name in args.models.split(","):
        batches = args.bert_batches if name == "bert" else args.batches
        for batch in map(int, batches.split(",")):
            try:
                r = bench_one(args, name, batch, args.work, log)
            except Exception as e:  # one failing configuration must not hide the others
                r = {"model": name, "batch": batch, "error": str(e)[-1500:]}
            results["runs"].append(r)
            print(json.dumps({k: v for k, v in r.items() if k != "kiln_bench"}), flush=True)
    results["matmul"] = matmul_bench(args, log)
    with open(os.path.join(args.out, "bench.json"), "w") as f:
        json.dump(results, f, indent=1)
    print(f"\n{'model':<10}{'batch':>6}  {'kiln ms':>9}  {'as':<14}{'eager ms':>9}{'compile ms':>11}"
          f"{'vs compile':>11}{'vs eager':>9}  {'rel err':>8}")
    for r in results["runs"]:
        if "speedup_vs_compile" not in r:
            print(f"{r['model']:<10}{r['batch']:>6}  error: {r.get('error', '?')[:200]}")
            continue
        print(f"{r['model']:<10}{r['batch']:>6}  {r['kiln_compared_ms']:>9.3f}  {r['kiln_compared_as'][:13]:<14}"
              f"{r['torch_eager']['median_ms']:>9.3f}{r['torch_compile']['median_ms']:>11.3f}"
              f"{r['speedup_vs_compile']:>10.2f}x{r['speedup_vs_eager']:>8.2f}x  {r['kiln_rel_l2_vs_torch_fp32']:>8.1e}")
    for line in results["matmul"].get("lines", []):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
