#!/usr/bin/env bash
# On the GPU machine (issue #22's figures), from the repository root with .gpu/ packed
# (`../shared/gpu/pack.sh -p kiln-cli` here, which puts the release `kiln` in .gpu/bin):
#   bash scripts/gpu/refit_resnet50.sh
# Exports ResNet-50 twice with random weights (PyTorch's default exporter: external data),
# builds a refittable and a weight-stripped cuda engine from the first, and reports the
# stripped engine's share of the full one, how long `kiln refit` from the ONNX file takes, and
# how far an engine refitted to the second checkpoint is from one built from it.
set -euo pipefail
source "$(dirname "$0")/env.sh"
work=${OUT:-/tmp}/refit_resnet50
mkdir -p "$work/a" "$work/b"
"$py" - "$work" <<'PY'
import sys, numpy as np, torch, torchvision
work = sys.argv[1]
x = torch.from_numpy(np.random.default_rng(0).random((8, 3, 224, 224), dtype=np.float32))
np.savez(f"{work}/inputs.npz", x=x.numpy())
for seed, name in [(0, "a"), (1, "b")]:
    torch.manual_seed(seed)
    model = torchvision.models.resnet50().eval()
    torch.onnx.export(model, (x,), f"{work}/{name}/model.onnx", input_names=["x"], output_names=["y"])
PY
"$kiln" build "$work/a/model.onnx" --backend cuda --flag refit -o "$work/full.engine" -q
"$kiln" build "$work/a/model.onnx" --backend cuda --flag refit --flag strip_weights -o "$work/stripped.engine" -q
full=$(stat -c%s "$work/full.engine"); stripped=$(stat -c%s "$work/stripped.engine")
echo "full engine $full bytes, stripped $stripped bytes: $(python3 -c "print(f'{100*$stripped/$full:.3f}%')") of the full"
start=$(date +%s.%N)
"$kiln" refit "$work/stripped.engine" --weights "$work/a/model.onnx" -o "$work/refitted.engine"
echo "kiln refit (process, import and write included): $(python3 -c "print(f'{$(date +%s.%N)-$start:.2f} s')")"
"$kiln" refit "$work/full.engine" --weights "$work/b/model.onnx" -o "$work/a_to_b.engine" -q
"$kiln" build "$work/b/model.onnx" --backend cuda -o "$work/b.engine" -q
for e in refitted full a_to_b b; do
  "$kiln" run "$work/$e.engine" --inputs "$work/inputs.npz" --save-outputs "$work/$e.npz" -q
done
"$py" - "$work" <<'PY'
import sys, numpy as np
work = sys.argv[1]
y = lambda e: np.load(f"{work}/{e}.npz")["y"]
rel = lambda a, b: float(np.abs(a - b).max() / np.abs(b).max())
print(f"stripped+refit vs full: max relative difference {rel(y('refitted'), y('full')):.2e}")
print(f"refit A->B vs build B:  max relative difference {rel(y('a_to_b'), y('b')):.2e}")
print(f"A vs B (the refit changed something): {rel(y('full'), y('b')):.2e}")
PY
