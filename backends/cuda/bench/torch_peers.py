"""Exports ResNet-50 (torchvision) and BERT-base (transformers) with random weights to ONNX
(opset 17, TorchScript exporter) and times PyTorch eager and torch.compile at batch 1 in fp16
with CUDA events (warm-up, then the median of 200 runs), on the GPU machine:

    /opt/torch/.venv/bin/python torch_peers.py OUT_DIR

Writes OUT_DIR/resnet50.onnx, OUT_DIR/bert_base.onnx and OUT_DIR/torch_peers.json.
"""
import json
import sys
import time

import torch
import torchvision
from transformers import BertConfig, BertModel  # noqa: E402

out = sys.argv[1]
torch.manual_seed(0)


def median_ms(fn, warmup=30, reps=200):
    with torch.inference_mode():
        for _ in range(warmup):
            fn()
        torch.cuda.synchronize()
        times = []
        for _ in range(reps):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end))
    times.sort()
    return times[len(times) // 2]


def peers(name, model, inputs):
    model = model.half().cuda().eval()
    inputs = [x.cuda().half() if x.is_floating_point() else x.cuda() for x in inputs]
    row = {"eager_ms": median_ms(lambda: model(*inputs))}
    started = time.time()
    compiled = torch.compile(model)
    row["compile_ms"] = median_ms(lambda: compiled(*inputs))
    row["compile_s"] = time.time() - started
    print(name, row, flush=True)
    return row


class Bert(torch.nn.Module):
    """BERT-base taking (input_ids, attention_mask) positionally, returning a tuple."""

    def __init__(self):
        super().__init__()
        self.bert = BertModel(BertConfig()).eval()

    def forward(self, input_ids, attention_mask):
        out = self.bert(input_ids=input_ids, attention_mask=attention_mask, return_dict=False)
        return out[0], out[1]


results = {}
resnet = torchvision.models.resnet50(weights=None).eval()
image = torch.randn(1, 3, 224, 224)
torch.onnx.export(resnet, (image,), f"{out}/resnet50.onnx", opset_version=17, dynamo=False,
                  input_names=["input"], output_names=["output"])
bert = Bert().eval()
ids = torch.randint(0, 10, (1, 128))
mask = torch.ones(1, 128, dtype=torch.int64)
torch.onnx.export(bert, (ids, mask), f"{out}/bert_base.onnx", opset_version=17, dynamo=False,
                  input_names=["input_ids", "attention_mask"], output_names=["last_hidden_state", "pooler_output"])
print("exported", flush=True)
results["resnet50_fp16_b1"] = peers("resnet50", resnet, [image])
results["bert_base_fp16_s128_b1"] = peers("bert_base", bert, [ids, mask])
with open(f"{out}/torch_peers.json", "w") as f:
    json.dump(results, f, indent=1)
