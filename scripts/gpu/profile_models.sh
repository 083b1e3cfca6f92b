#!/usr/bin/env bash
# On the GPU machine (issue #19), from the repository root with .gpu/ packed (the `kiln`
# binary in .gpu/bin):
#   bash scripts/gpu/profile_models.sh [BATCH] [torchvision model names…]
# Exports each torchvision model (random weights, legacy exporter, static batch), builds an
# fp16 cuda engine and prints kiln's per-layer profile (`kiln bench --dump-profile`): where
# the GPU time goes, layer by layer, with what each layer fused.
set -euo pipefail
source "$(dirname "$0")/env.sh"
batch=${1:-64}
shift || true
models=("$@")
[ ${#models[@]} -gt 0 ] || models=(convnext_tiny vit_b_16)
work=${OUT:-/tmp}/profiles
mkdir -p "$work"
for m in "${models[@]}"; do
  "$py" - "$work" "$m" "$batch" <<'PY'
import sys, torch, torchvision
work, name, batch = sys.argv[1], sys.argv[2], int(sys.argv[3])
torch.manual_seed(0)
model = torchvision.models.get_model(name).eval()
torch.onnx.export(model, (torch.randn(batch, 3, 224, 224),), f"{work}/{name}.onnx", input_names=["x"], output_names=["y"], dynamo=False)
PY
  "$kiln" build "$work/$m.onnx" --backend cuda --fp16 -o "$work/$m.engine" -q
  echo "== $m, batch $batch"
  "$kiln" bench "$work/$m.engine" --duration-s 2 --dump-profile --export-profile "$work/$m.profile.json" | head -60
done
