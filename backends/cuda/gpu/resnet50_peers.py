# Exports torchvision ResNet-50 (random weights) to ONNX at batch 1 and 128 into $MODELS (default
# /tmp), with an input / fp32-output npz for batch 1 (kiln's correctness check), then times
# PyTorch eager and torch.compile in fp16 with CUDA events (warm-up, medians): the peers of
# kiln-cuda's ResNet-50 bench (tests/gpu/conv_bench.rs), run in the same call.
import os, sys, statistics
import numpy as np
import torch, torchvision

models = os.environ.get("MODELS", "/tmp")
torch.manual_seed(0)
m = torchvision.models.resnet50(weights=None).eval()
for b in (1, 128):
    path = f"{models}/resnet50_b{b}.onnx"
    x = torch.randn(b, 3, 224, 224)
    torch.onnx.export(m, x, path, opset_version=17, dynamo=False, input_names=["input"], output_names=["logits"])
    if b == 1:
        with torch.no_grad():
            y = m(x)
        np.savez(f"{models}/resnet50_b1.npz", input=x.numpy(), logits=y.numpy())
print("exported", flush=True)

def time_ms(f, x, reps=50, warm=10):
    for _ in range(warm):
        f(x)
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record(); f(x); e.record()
        times.append((s, e))
    torch.cuda.synchronize()
    return statistics.median(s.elapsed_time(e) for s, e in times)

mh = m.half().cuda()
with torch.no_grad():
    for fmt in ("nchw", "channels_last"):
        mf = mh.to(memory_format=torch.channels_last) if fmt == "channels_last" else mh
        compiled = torch.compile(mf)
        for b in ((1, 128) if fmt == "nchw" else (128,)):
            x = torch.randn(b, 3, 224, 224, device="cuda", dtype=torch.half)
            if fmt == "channels_last":
                x = x.to(memory_format=torch.channels_last)
            eager = time_ms(mf, x)
            comp = time_ms(compiled, x, warm=5)
            print(f"PEER resnet50 fp16 {fmt} b{b}: eager {eager:.3f} ms, torch.compile {comp:.3f} ms", flush=True)
