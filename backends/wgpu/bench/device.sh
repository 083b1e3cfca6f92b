#!/usr/bin/env bash
# On the GPU machine, from the checkout root with the packed .gpu/ beside it: the gemm test
# binary with its ignored benches (4096^3 tile variants, f16, empty dispatch, ResNet-18),
# then torch's cuBLAS peers in the same call. Logs under $OUT.
set -u
V=/opt/torch/.venv/lib/python3.12/site-packages/nvidia
export LD_LIBRARY_PATH="/usr/local/nvidia/lib64:$V/cu13/lib:$V/cudnn/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
if [ -d .gpu/gl ]; then
  for f in .gpu/gl/*.deb; do dpkg -x "$f" /; done; ldconfig
  export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
fi
out=${OUT:-/tmp}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
for t in .gpu/bin/test-gemm-*; do
  timeout 300 "$t" --include-ignored --nocapture --test-threads 1 ${1:+"$1"} 2>&1 | tee "$out/gemm.log" | grep -E 'BENCH|^test |panicked|tactics timed|SKIPPED'
done
PYTHONUNBUFFERED=1 timeout 120 /opt/torch/.venv/bin/python .gpu/torch_matmul.py 2>&1 | tee "$out/torch.log"
