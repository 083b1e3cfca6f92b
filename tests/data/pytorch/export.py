"""Exports the PyTorch models kiln's importer is checked against, with onnxruntime's outputs.

Run where torch, onnx and onnxruntime are installed (the GPU machine has them):
    python3 tests/data/pytorch/export.py OUT_DIR
For each model and exporter it writes NAME.onnx and NAME.npz (the inputs under their ONNX
input names, the expected outputs under their ONNX output names). Weights are random with
a fixed seed; expected outputs come from onnxruntime (CPU) and are checked against PyTorch.
"""
import sys, os
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import onnx
import onnxruntime as ort


class ConvBnRelu(nn.Sequential):
    def __init__(self, cin, cout, k=3, stride=1, groups=1):
        super().__init__(nn.Conv2d(cin, cout, k, stride, k // 2, groups=groups, bias=False),
                         nn.BatchNorm2d(cout), nn.ReLU())


class Residual(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.a = ConvBnRelu(c, c)
        self.b = nn.Sequential(nn.Conv2d(c, c, 3, 1, 1, bias=False), nn.BatchNorm2d(c))

    def forward(self, x):
        return F.relu(x + self.b(self.a(x)))


class SmallCnn(nn.Module):
    """ResNet-style blocks plus depthwise conv, hardswish, upsampling and concat."""

    def __init__(self):
        super().__init__()
        self.stem = ConvBnRelu(3, 16)
        self.pool = nn.MaxPool2d(2)
        self.res = Residual(16)
        self.down = ConvBnRelu(16, 32, stride=2)
        self.dw = nn.Conv2d(32, 32, 3, 1, 1, groups=32)
        self.pw = nn.Conv2d(64, 32, 1)
        self.head = nn.Linear(32, 10)

    def forward(self, x):
        x = self.res(self.pool(self.stem(x)))
        d = self.down(x)
        y = F.hardswish(self.dw(d))
        up = F.interpolate(F.avg_pool2d(d, 2), scale_factor=2.0, mode="nearest")
        x = torch.sigmoid(self.pw(torch.cat([y, up], dim=1))) * d
        x = F.adaptive_avg_pool2d(x, 1).flatten(1)
        return torch.softmax(self.head(x), dim=-1)


class Attention(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(d, 3 * d)
        self.out = nn.Linear(d, d)

    def forward(self, x, mask):
        b, s, d = x.shape
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        split = lambda t: t.reshape(b, s, self.heads, d // self.heads).transpose(1, 2)
        q, k, v = split(q), split(k), split(v)
        scores = q @ k.transpose(-1, -2) / (d // self.heads) ** 0.5 + mask
        ctx = torch.softmax(scores, dim=-1) @ v
        return self.out(ctx.transpose(1, 2).reshape(b, s, d))


class EncoderLayer(nn.Module):
    def __init__(self, d, heads, ff):
        super().__init__()
        self.attn = Attention(d, heads)
        self.ln1 = nn.LayerNorm(d)
        self.ff = nn.Sequential(nn.Linear(d, ff), nn.GELU(), nn.Linear(ff, d))
        self.ln2 = nn.LayerNorm(d)

    def forward(self, x, mask):
        x = self.ln1(x + self.attn(x, mask))
        return self.ln2(x + self.ff(x))


class MiniBert(nn.Module):
    """BERT-style encoder: token + position embeddings, masked attention, GELU FFN."""

    def __init__(self, vocab=100, d=64, heads=4, ff=128, layers=2, seq=16):
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Parameter(torch.randn(1, seq, d) * 0.1)
        self.ln = nn.LayerNorm(d)
        self.layers = nn.ModuleList(EncoderLayer(d, heads, ff) for _ in range(layers))
        self.pool = nn.Linear(d, d)

    def forward(self, ids, attention_mask):
        mask = (1.0 - attention_mask[:, None, None, :].to(torch.float32)) * -10000.0
        x = self.ln(self.tok(ids) + self.pos[:, : ids.shape[1]])
        for layer in self.layers:
            x = layer(x, mask)
        return x, torch.tanh(self.pool(x[:, 0]))


def randomize_norms(model):
    # Fresh BatchNorm statistics are 0/1: give them values so folding is really exercised.
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.uniform_(-0.5, 0.5)
            m.running_var.uniform_(0.5, 1.5)
            m.weight.data.uniform_(0.5, 1.5)
            m.bias.data.uniform_(-0.2, 0.2)


def export(model, args, names, outputs, path, dynamo, dynamic):
    kwargs = dict(input_names=names, output_names=outputs)
    if dynamo:
        torch.onnx.export(model, args, path, dynamo=True, opset_version=18, external_data=False, **kwargs)
    else:
        axes = {n: {0: "batch"} for n in names + outputs} if dynamic else None
        torch.onnx.export(model, args, path, dynamo=False, opset_version=17, dynamic_axes=axes, **kwargs)


def main(out_dir):
    os.makedirs(out_dir, exist_ok=True)
    torch.manual_seed(0)
    cnn = SmallCnn().eval()
    randomize_norms(cnn)
    bert = MiniBert().eval()
    x = torch.randn(2, 3, 32, 32)
    ids = torch.randint(0, 100, (2, 16))
    attn = torch.ones(2, 16, dtype=torch.int64)
    attn[1, 12:] = 0
    cases = [
        ("cnn", cnn, (x,), ["image"], ["probs"]),
        ("bert", bert, (ids, attn), ["input_ids", "attention_mask"], ["hidden", "pooled"]),
    ]
    for name, model, args, ins, outs in cases:
        with torch.no_grad():
            ref = model(*args)
        ref = ref if isinstance(ref, tuple) else (ref,)
        for tag, dynamo in (("torchscript", False), ("dynamo", True)):
            path = os.path.join(out_dir, f"{name}_{tag}.onnx")
            try:
                export(model, args, ins, outs, path, dynamo, dynamic=True)
            except Exception as e:  # report and go on: one exporter failing must not hide the other
                print(f"{name}/{tag}: export failed: {type(e).__name__}: {e}")
                continue
            m = onnx.load(path)
            onnx.checker.check_model(m)
            sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
            feed = {i.name: a.numpy() for i, a in zip(sess.get_inputs(), args)}
            got = sess.run(None, feed)
            for o, r in zip(got, ref):
                np.testing.assert_allclose(o, r.numpy(), rtol=1e-3, atol=1e-4)
            arrays = dict(feed)
            for meta, o in zip(sess.get_outputs(), got):
                arrays[meta.name] = o
            np.savez(os.path.join(out_dir, f"{name}_{tag}.npz"), **arrays)
            ops = sorted({n.op_type for n in m.graph.node})
            print(f"{name}/{tag}: opset {m.opset_import[0].version}, {os.path.getsize(path)} bytes, ops {ops}")


if __name__ == "__main__":
    main(sys.argv[1])
