#!/usr/bin/env bash
# On the GPU machine (issue #23's figure), from the repository root with .gpu/ packed (the
# `kiln` binary in .gpu/bin):
#   bash scripts/gpu/streams_resnet50.sh
# Exports ResNet-50 at batch 1 (random weights, static batch), builds one fp16 cuda engine and
# benches it with 1 and with 4 contexts at once (`--streams`): the aggregate throughput of
# four contexts over one's.
set -euo pipefail
source "$(dirname "$0")/env.sh"
work=${OUT:-/tmp}/streams_resnet50
mkdir -p "$work"
"$py" - "$work" <<'PY'
import sys, torch, torchvision
work = sys.argv[1]
torch.manual_seed(0)
model = torchvision.models.resnet50().eval()
torch.onnx.export(model, (torch.randn(1, 3, 224, 224),), f"{work}/model.onnx", input_names=["x"], output_names=["y"], dynamo=False)
PY
"$kiln" build "$work/model.onnx" --backend cuda --fp16 -o "$work/r50.engine" -q
for n in 1 2 4 8; do
  "$kiln" bench "$work/r50.engine" --streams "$n" --duration-s 3 --json "$work/streams$n.json" -q
done
"$py" - "$work" <<'PY'
import sys, json
work = sys.argv[1]
one = None
for n in (1, 2, 4, 8):
    j = json.load(open(f"{work}/streams{n}.json"))
    ips = j["throughput"]["inferences_per_s"]
    one = one or ips
    lat = j["latency_ms"]["median"]
    gpu = (j.get("gpu_compute_ms") or {}).get("median")
    print(f"streams {n}: {ips:8.0f} inferences/s ({ips / one:.2f}x one context), latency median {lat:.3f} ms, GPU compute median {gpu} ms")
PY
