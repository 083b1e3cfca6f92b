"""Peer figures for kiln-wgpu's matmul bench, measured in the same device call:
torch.mm (cuBLAS/cuBLASLt) at 4096^3 in fp32 without TF32 and in fp16, median of 30 CUDA-event
timings after warm-up, on random data."""
import torch

torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False


def bench(dtype, n=4096, reps=30):
    a = torch.rand(n, n, device="cuda", dtype=dtype) * 2 - 1
    b = torch.rand(n, n, device="cuda", dtype=dtype) * 2 - 1
    for _ in range(5):
        torch.mm(a, b)
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        torch.mm(a, b)
        e.record()
        e.synchronize()
        times.append(s.elapsed_time(e))
    times.sort()
    ms = times[len(times) // 2]
    return ms, 2 * n**3 / (ms * 1e-3) / 1e12


for name, dt in [("fp32 (no TF32)", torch.float32), ("fp16", torch.float16)]:
    ms, tf = bench(dt)
    print(f"PEER torch.mm {name} 4096^3: median {ms:.3f} ms = {tf:.2f} TFLOP/s")
