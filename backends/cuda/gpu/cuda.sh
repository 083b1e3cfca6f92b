#!/usr/bin/env bash
# kiln-cuda on the GPU machine: NVRTC compile test, GPU tests (one thread, so the logs read in
# order), then the MatrixMultiply benchmark alone on the device. Logs under $OUT.
# Here: build the test binaries, copy them stripped to .gpu-cuda/bin/test-{gpu,nvrtc_compile}
# with this script beside them. There (a warm machine keeps the last .gpu, so remove it first):
#   rm -rf .gpu && mv .gpu-cuda .gpu && bash .gpu/cuda.sh [test filter] [bench|skip]
set -u
V=/opt/torch/.venv/lib/python3.12/site-packages/nvidia
export LD_LIBRARY_PATH="/usr/local/nvidia/lib64:$V/cu13/lib:$V/cudnn/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
export KILN_CUDA_INCLUDE=/usr/local/cuda/include KILN_REPO="$PWD" KILN_REQUIRE_CUDA=1 KILN_REQUIRE_NVRTC=1
out=${OUT:-/tmp}
nvidia-smi --query-gpu=name,driver_version,memory.used,memory.total --format=csv,noheader
.gpu/bin/test-nvrtc_compile 2>&1 | tee "$out/nvrtc.log" | grep -E "^test |panicked|result"
.gpu/bin/test-gpu --test-threads=1 --nocapture --skip bench ${1:-} 2>&1 | tee "$out/gpu.log" | grep -E "^test |panicked|error|differs|result|worst|cuda device" | cut -c1-400
if [ "${2:-bench}" = bench ]; then
  KILN_CUDA_BENCH=1 .gpu/bin/test-gpu bench --nocapture 2>&1 | tee "$out/bench.log" | grep -E "BENCH|panicked|result" | cut -c1-400
fi
