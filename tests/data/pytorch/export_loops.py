"""Exports TorchScript loops (ONNX Loop / If / sequence ops) with PyTorch's own outputs.

Run where torch and onnx are installed (the GPU machine has them):
    python3 tests/data/pytorch/export_loops.py OUT_DIR
For each model it writes NAME.onnx (TorchScript exporter, opset 17) and NAME.npz (inputs
under their ONNX input names, PyTorch's outputs under the ONNX output names). When
onnxruntime is present it is checked against PyTorch too.
"""
import sys, os
from typing import List
import numpy as np
import torch
import torch.nn as nn
import onnx


class SumEven(nn.Module):
    """A for loop with an `if` inside: sums the elements at even positions that are positive."""

    def forward(self, x):
        s = torch.zeros_like(x[0])
        for i in range(x.shape[0]):
            if i % 2 == 0:
                if bool(x[i].sum() > 0):
                    s = s + x[i]
        return s


class WhileDoubling(nn.Module):
    """A while loop whose trip count depends on the data: doubles until over the limit."""

    def forward(self, x, limit):
        n = torch.zeros([], dtype=torch.int64)
        while bool(x.sum() < limit):
            x = x * 2.0 + 1.0
            n = n + 1
        return x, n


class ListAccumulate(nn.Module):
    """An RNN-style loop appending to a list, stacked afterwards (SequenceInsert / ConcatFromSequence)."""

    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(8, 8) * 0.3)
        self.u = nn.Parameter(torch.randn(4, 8) * 0.3)

    def forward(self, x):
        h = torch.zeros(x.shape[1], 8)
        outs: List[torch.Tensor] = []
        for t in range(x.shape[0]):
            h = torch.tanh(x[t] @ self.u + h @ self.w)
            outs.append(h)
        return torch.stack(outs), torch.cat(outs, dim=1)


class NestedLoops(nn.Module):
    """A loop inside a loop, the inner trip count depending on the outer index."""

    def forward(self, x):
        acc = torch.zeros_like(x)
        for i in range(x.shape[0]):
            for j in range(i + 1):
                acc = acc + x * float(j + 1)
        return acc


def main(out_dir):
    os.makedirs(out_dir, exist_ok=True)
    torch.manual_seed(0)
    cases = [
        ("loop_sum_even", SumEven(), (torch.randn(7, 3),), ["x"], ["sum"]),
        ("loop_while", WhileDoubling(), (torch.rand(4), torch.tensor(100.0)), ["x", "limit"], ["y", "steps"]),
        ("loop_list", ListAccumulate(), (torch.randn(5, 2, 4),), ["x"], ["stacked", "concatenated"]),
        ("loop_nested", NestedLoops(), (torch.randn(3, 2),), ["x"], ["acc"]),
    ]
    for name, model, args, ins, outs in cases:
        scripted = torch.jit.script(model.eval())
        with torch.no_grad():
            ref = scripted(*args)
        ref = ref if isinstance(ref, tuple) else (ref,)
        path = os.path.join(out_dir, f"{name}.onnx")
        axes = {n: {0: "n"} for n in ins if args[ins.index(n)].dim() > 0}
        torch.onnx.export(scripted, args, path, dynamo=False, opset_version=17,
                          input_names=ins, output_names=outs, dynamic_axes=axes)
        m = onnx.load(path)
        onnx.checker.check_model(m)
        arrays = {n: a.numpy() for n, a in zip(ins, args)}
        for o, r in zip(outs, ref):
            arrays[o] = r.detach().numpy()
        try:
            import onnxruntime as ort
            sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
            feed = {i.name: arrays[i.name] for i in sess.get_inputs()}
            for meta, got in zip(sess.get_outputs(), sess.run(None, feed)):
                np.testing.assert_allclose(got, arrays[meta.name], rtol=1e-4, atol=1e-5)
            checked = "onnxruntime agrees"
        except ImportError:
            checked = "onnxruntime absent"
        np.savez(os.path.join(out_dir, f"{name}.npz"), **arrays)
        ops = sorted({n.op_type for n in m.graph.node})
        print(f"{name}: {os.path.getsize(path)} bytes, ops {ops}, {checked}")


if __name__ == "__main__":
    main(sys.argv[1])
