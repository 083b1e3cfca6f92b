"""Q/DQ INT8 against fp16 on architectures nobody tuned for (issue #21's general property).

On the GPU machine:
    python benches/gpu/qdq_sweep.py [--models a,b] [--batch 32] [--exporter legacy|dynamo] [--budget-s 540]

Each torchvision model (random weights) is exported as harness.py exports, quantized by
onnxruntime's `quantize_static` as quant.py quantizes (Conv, MatMul and Gemm), then kiln builds
a Q/DQ engine (`--flag int8 --flag fp16`) and an fp16 engine of the float model; both are run
and timed (`kiln bench`'s GPU compute median) in the same call. The Q/DQ engine is compared with
onnxruntime's CPU run of the Q/DQ graph on the first rows, the fp16 one with PyTorch's fp32.
One line a model; kiln's whole output goes to $OUT/sweep.log. With --profile, each engine's
per-layer profile (`kiln bench --export-profile`) lands in $OUT/{model}_{qdq,fp16}.profile.json
and the Q/DQ engine's five costliest tactics are printed under its line.
"""
import argparse, collections, json, os, sys, time, traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import numpy as np, torch, torchvision
import harness, quant  # the exporter and quantizer settings the benches use

MODELS = ["efficientnet_b0", "convnext_tiny", "mobilenet_v3_large", "regnet_y_800mf", "swin_t"]

p = argparse.ArgumentParser()
p.add_argument("--models", default=",".join(MODELS))
p.add_argument("--batch", type=int, default=32)
p.add_argument("--exporter", default="legacy", choices=["legacy", "dynamo"])
p.add_argument("--budget-s", type=float, default=540.0, help="models not started this long after the start are skipped")
p.add_argument("--kiln", default=".gpu/bin/kiln")
p.add_argument("--profile", action="store_true", help="per-layer profiles of both engines")
args = p.parse_args()
out = os.environ.get("OUT", "/tmp"); work = "/tmp/qdq_sweep"; os.makedirs(work, exist_ok=True)
deadline = time.time() + args.budget_s
kiln = quant.Kiln(os.path.abspath(args.kiln), "cuda", work, open(os.path.join(out, "sweep.log"), "w"), 0)
rows = 4
for name in args.models.split(","):
    if time.time() > deadline - 90:
        print(f"{name}: skipped (budget)", flush=True)
        continue
    t0 = time.time()
    try:
        rng = np.random.default_rng(0)
        torch.manual_seed(0)
        model = getattr(torchvision.models, name)(weights=None).eval()
        fp32, qdq = f"{work}/{name}.onnx", f"{work}/{name}.qdq.onnx"
        harness.export(model, ["input"], ["logits"], [rng.standard_normal((2, 3, 224, 224), dtype=np.float32)], fp32, args.exporter)
        calibration = [{"input": rng.standard_normal((8, 3, 224, 224), dtype=np.float32)} for _ in range(4)]
        quant.quantize_qdq(fp32, qdq, calibration, ["Conv", "MatMul", "Gemm"])
        x = rng.standard_normal((args.batch, 3, 224, 224), dtype=np.float32)
        npz = quant.save_npz(f"{work}/{name}_in.npz", {"input": x})
        with torch.no_grad():
            reference = model(torch.from_numpy(x[:rows])).numpy()
        ort = quant.ort_run(qdq, {"input": x[:rows]}, optimize=False)
        result = {}
        for tag, path, flags in [("qdq", qdq, ["--flag", "int8", "--flag", "fp16"]), ("fp16", fp32, ["--flag", "fp16"])]:
            engine = f"{work}/{name}_{tag}.kiln"
            build = kiln.build(path, engine, flags, {"input": x.shape})
            got = kiln.run(engine, npz)["logits"][:rows]
            ms = kiln.bench(engine, npz, 1.0)["ms"]
            if args.profile:
                kiln.call("bench", engine, "--inputs", npz, "--warmup-ms", 200, "--duration-s", 0.5, "--export-profile", f"{out}/{name}_{tag}.profile.json")
            result[tag] = (ms, quant.rel_l2(got, ort if tag == "qdq" else reference), (build.get("layers") or {}).get("count"))
        (q_ms, q_err, q_layers), (f_ms, f_err, f_layers) = result["qdq"], result["fp16"]
        print(f"{name:<20} Q/DQ {q_ms:7.3f} ms  fp16 {f_ms:7.3f} ms  Q/DQ throughput {f_ms / q_ms:5.2f}x fp16 | "
              f"Q/DQ vs onnxruntime {q_err:.2e} (onnxruntime vs fp32 {quant.rel_l2(ort, reference):.2e})  fp16 vs fp32 {f_err:.2e} | "
              f"layers {q_layers} / {f_layers}  [{time.time() - t0:.0f} s]", flush=True)
        if args.profile:  # where the Q/DQ engine's time goes, by tactic
            by_tactic = collections.defaultdict(lambda: [0, 0.0])
            for layer in json.load(open(f"{out}/{name}_qdq.profile.json"))["layers"]:
                entry = by_tactic[layer["tactic"]]
                entry[0] += 1
                entry[1] += layer["median_ms"]
            for tactic, (count, ms) in sorted(by_tactic.items(), key=lambda kv: -kv[1][1])[:5]:
                print(f"    {tactic:<56} {count:4d} layers {ms:8.3f} ms", flush=True)
    except Exception as e:  # one model's failure is reported, the others still run
        print(f"{name}: FAILED {type(e).__name__}: {str(e)[-600:]}", flush=True)
        traceback.print_exc()
