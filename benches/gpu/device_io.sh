#!/usr/bin/env bash
# Issue #23's runtime figures on the GPU machine, from the repository root after
# `bash .gpu/run.sh` set-up (KILN names the kiln binary; default .gpu/bin/kiln):
#   - ResNet-50 fp16 at batch 128 end to end with host buffers, with page-locked host buffers
#     (--pinned-host-io, what registered host memory gives) and with device-resident I/O
#     (--no-data-transfers): latency against GPU compute (and the H2D copy's rate);
#   - batch 1 with one context and with four at once (--streams 4): aggregate throughput.
# Exports torchvision's ResNet-50 (random weights, dynamic batch, legacy exporter) first.
# Writes WORK/*.json (default WORK=$OUT or /tmp/kiln-device-io) and prints a summary.
set -euo pipefail
kiln=${KILN:-.gpu/bin/kiln}
work=${WORK:-${OUT:-/tmp/kiln-device-io}}
secs=${SECS:-3}
mkdir -p "$work"
python3 - "$work/resnet50.onnx" <<'EOF'
import sys, torch, torchvision
model = torchvision.models.resnet50().eval()
torch.onnx.export(model, torch.randn(1, 3, 224, 224), sys.argv[1], dynamo=False, input_names=["input"],
                  output_names=["logits"], dynamic_axes={"input": {0: "N"}, "logits": {0: "N"}})
EOF
for batch in 128 1; do
  shape="input:${batch}x3x224x224"
  "$kiln" build "$work/resnet50.onnx" --backend cuda --fp16 --min-shapes "$shape" --opt-shapes "$shape" \
    --max-shapes "$shape" -o "$work/resnet50_b$batch.kiln" -q
done
bench() { # NAME ENGINE ARGS...
  local name=$1 engine=$2; shift 2
  "$kiln" bench "$engine" --shapes "input:$(basename "$engine" .kiln | sed 's/.*_b//')x3x224x224" \
    --warmup-ms 500 --duration-s "$secs" --json "$work/$name.json" -q "$@" > "$work/$name.txt"
}
bench b128_host "$work/resnet50_b128.kiln"
bench b128_device "$work/resnet50_b128.kiln" --no-data-transfers
bench b128_pinned "$work/resnet50_b128.kiln" --pinned-host-io
bench b1_one "$work/resnet50_b1.kiln" --no-data-transfers
bench b1_four "$work/resnet50_b1.kiln" --no-data-transfers --streams 4
bench b1_one_host "$work/resnet50_b1.kiln"
bench b1_four_host "$work/resnet50_b1.kiln" --streams 4
python3 - "$work" <<'EOF'
import json, sys, os
work = sys.argv[1]
r = {n: json.load(open(os.path.join(work, n + ".json"))) for n in
     ["b128_host", "b128_pinned", "b128_device", "b1_one", "b1_four", "b1_one_host", "b1_four_host"]}
med = lambda v, k: v[k]["median"] if v.get(k) else float("nan")
for n, v in r.items():
    print(f"{n:13} latency {med(v, 'latency_ms'):8.3f} ms  GPU compute {med(v, 'gpu_compute_ms'):8.3f} ms  "
          f"H2D {med(v, 'h2d_ms'):7.3f} ms  throughput {v['throughput']['inferences_per_s']:9.1f}/s")
d = r["b128_device"]
print(f"b128 device-resident: latency / GPU compute = {med(d, 'latency_ms') / med(d, 'gpu_compute_ms'):.3f}")
p = r["b128_pinned"]
input_bytes = 128 * 3 * 224 * 224 * 4
h2d = med(p, "h2d_ms")
print(f"b128 pinned host: latency {med(p, 'latency_ms'):.3f} ms = {med(p, 'latency_ms') / (med(p, 'gpu_compute_ms') + h2d):.3f}x (GPU compute + H2D); "
      f"H2D {input_bytes / h2d / 1e6:.1f} GB/s; budget at 20 GB/s + 10%: {1.1 * (med(p, 'gpu_compute_ms') + input_bytes / 20e9 * 1e3):.3f} ms")
for kind in ["", "_host"]:
    one, four = r["b1_one" + kind], r["b1_four" + kind]
    print(f"b1{kind or '_device'}: 4 contexts / 1 = {four['throughput']['inferences_per_s'] / one['throughput']['inferences_per_s']:.2f}x")
EOF
