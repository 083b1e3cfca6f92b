#!/usr/bin/env bash
# Issue #21's 2:4 sparsity figures on the GPU machine, from the repository root (KILN names the
# kiln binary; default .gpu/bin/kiln; cuSPARSELt's folder on LD_LIBRARY_PATH):
#   for torchvision's ResNet-50 at batch 256 and BERT-base (transformers, sequence 128) at
#   batch 32, random weights, legacy exporter: built fp16 dense and fp16 with `--sparsity
#   force` (every weight pruned to 2:4), the build log's "(Sparsity)" lines (eligible and
#   picked layers) and both engines' GPU time.
# MODELS picks (default "resnet50 bert"). Writes WORK/* (default WORK=$OUT or /tmp/kiln-sparse).
set -euo pipefail
kiln=${KILN:-.gpu/bin/kiln}
work=${WORK:-${OUT:-/tmp/kiln-sparse}}
secs=${SECS:-3}
mkdir -p "$work"
python3 - "$work" ${MODELS:-resnet50 bert} <<'EOF'
import sys, numpy as np, torch
work, models = sys.argv[1], sys.argv[2:]
torch.manual_seed(0)
if "resnet50" in models:
    import torchvision
    model = torchvision.models.resnet50().eval()
    torch.onnx.export(model, torch.randn(256, 3, 224, 224), f"{work}/resnet50.onnx", dynamo=False,
                      input_names=["input"], output_names=["logits"])
    np.savez(f"{work}/resnet50_in.npz", input=np.random.default_rng(0).standard_normal((256, 3, 224, 224), dtype=np.float32))
if "bert" in models:
    from transformers import BertConfig, BertModel
    class Bert(torch.nn.Module):  # keyword arguments: BertModel's positional ones vary by version
        def __init__(self):
            super().__init__()
            self.bert = BertModel(BertConfig()).eval()
        def forward(self, input_ids, attention_mask):
            return self.bert(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
    model = Bert().eval()
    ids = torch.randint(0, 30522, (32, 128))
    mask = torch.ones(32, 128, dtype=torch.int64)
    torch.onnx.export(model, (ids, mask), f"{work}/bert.onnx", dynamo=False,
                      input_names=["input_ids", "attention_mask"], output_names=["last_hidden_state"])
    np.savez(f"{work}/bert_in.npz", input_ids=ids.numpy(), attention_mask=mask.numpy())
EOF
for model in ${MODELS:-resnet50 bert}; do
  for variant in dense sparse; do
    extra=()
    [ "$variant" = sparse ] && extra=(--sparsity force)
    "$kiln" build "$work/$model.onnx" --backend cuda --fp16 "${extra[@]}" -o "$work/${model}_$variant.kiln" -v \
      > "$work/${model}_build_$variant.log" 2>&1
    "$kiln" bench "$work/${model}_$variant.kiln" --inputs "$work/${model}_in.npz" --no-data-transfers --warmup-ms 500 \
      --duration-s "$secs" --json "$work/${model}_$variant.json" -q > "$work/${model}_bench_$variant.txt"
  done
  echo "== $model"
  grep -h "^builder: (Sparsity)\|SPARSE_WEIGHTS" "$work/${model}_build_sparse.log" | cut -c1-300 || true
  python3 - "$work" "$model" <<'EOF'
import json, sys
work, model = sys.argv[1], sys.argv[2]
picked = [l for l in open(f"{work}/{model}_build_sparse.log") if l.startswith("builder: (Sparsity) the engine picked")]
eligible = [l for l in open(f"{work}/{model}_build_sparse.log") if l.startswith("builder: (Sparsity) Layers eligible")]
count = lambda lines: 0 if not lines or lines[0].rstrip().endswith(": none") else lines[0].split(": ", 1)[1].count(", ") + 1
ms = {v: json.load(open(f"{work}/{model}_{v}.json"))["gpu_compute_ms"]["median"] for v in ("dense", "sparse")}
print(f"{model} fp16: {count(eligible)} layers eligible, {count(picked)} picked sparse; GPU time dense {ms['dense']:.3f} ms, "
      f"2:4 sparse {ms['sparse']:.3f} ms, speed-up {ms['dense'] / ms['sparse']:.3f}")
EOF
done
