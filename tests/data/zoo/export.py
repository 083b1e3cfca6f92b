"""Regression fixtures from the model zoo (benches/zoo): small models with the op patterns of
real PyTorch exports that kiln once failed on, each with PyTorch's own outputs.

Run where torch, torchvision, onnx and onnxscript are installed:
    python3 tests/data/zoo/export.py tests/data/zoo
Each fixture NAME is a folder NAME/ holding model.onnx (dynamo exports: with its weights as
external data in model.onnx.data beside it), inputs.npz (under the ONNX input names) and
expected.npz (PyTorch's fp32 outputs under the ONNX output names). Weights are random (seed 0),
so the files are a few KB to a few hundred KB.
"""
import os
import sys

import numpy as np
import onnx
import torch
import torchvision


def tiny_vit():
    # torchvision's VisionTransformer (nn.MultiheadAttention inside) at toy size. Its head is
    # zero-initialized: redraw it so the outputs are not all zero.
    model = torchvision.models.VisionTransformer(
        image_size=32, patch_size=8, num_layers=2, num_heads=2, hidden_dim=16, mlp_dim=32, num_classes=10)
    torch.nn.init.normal_(model.heads.head.weight, std=0.2)
    return model.eval(), (torch.randn(2, 3, 32, 32),)


class ScaledStdConv(torch.nn.Conv2d):
    """timm's NF-Net convolution: the weight is standardized per output channel by a
    training-mode batch norm over it, which the legacy exporter writes as
    BatchNormalization(training_mode=1)."""

    def forward(self, x):
        w = torch.nn.functional.batch_norm(
            self.weight.reshape(1, self.out_channels, -1), None, None, training=True, momentum=0.0, eps=1e-6)
        return torch.nn.functional.conv2d(x, w.reshape_as(self.weight), self.bias, self.stride, self.padding)


def tiny_nfnet():
    model = torch.nn.Sequential(ScaledStdConv(3, 8, 3, padding=1), torch.nn.GELU(), ScaledStdConv(8, 4, 3, stride=2))
    return model.eval(), (torch.randn(2, 3, 16, 16),)


FIXTURES = [
    # name, model factory, exporter, dynamic batch
    ("vit_legacy_static", tiny_vit, "legacy", False),
    ("vit_legacy_dynamic", tiny_vit, "legacy", True),
    ("vit_dynamo_dynamic", tiny_vit, "dynamo", True),
    ("nfnet_legacy_static", tiny_nfnet, "legacy", False),
]


def export(model, args, path, exporter, dynamic):
    names = [f"input_{i}" for i in range(len(args))] if len(args) > 1 else ["input"]
    if exporter == "dynamo":
        shapes = tuple({0: torch.export.Dim("batch", min=1, max=64)} for _ in args) if dynamic else None
        torch.onnx.export(model, args, path, dynamo=True, external_data=True, dynamic_shapes=shapes,
                          input_names=names, output_names=["output"])
    else:
        torch.backends.mha.set_fastpath_enabled(False)
        axes = {n: {0: "batch"} for n in names + ["output"]} if dynamic else None
        torch.onnx.export(model, args, path, dynamo=False, opset_version=17, dynamic_axes=axes,
                          input_names=names, output_names=["output"])


def main(out_dir):
    for name, factory, exporter, dynamic in FIXTURES:
        torch.manual_seed(0)
        model, args = factory()
        if not dynamic:
            args = tuple(a[:1] for a in args)
        folder = os.path.join(out_dir, name)
        os.makedirs(folder, exist_ok=True)
        path = os.path.join(folder, "model.onnx")
        export(model, args, path, exporter, dynamic)
        with torch.no_grad():
            out = model(*args)
        graph = onnx.load(path, load_external_data=False).graph
        np.savez(os.path.join(folder, "inputs.npz"), **{i.name: a.numpy() for i, a in zip(graph.input, args)})
        np.savez(os.path.join(folder, "expected.npz"), **{graph.output[0].name: out.numpy()})
        files = sorted(os.listdir(folder))
        print(f"{name}: {len(graph.node)} nodes, files {files}, output rms {float(out.pow(2).mean().sqrt()):.3g}")


if __name__ == "__main__":
    main(sys.argv[1])
