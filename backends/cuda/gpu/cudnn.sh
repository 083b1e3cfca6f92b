#!/usr/bin/env bash
# cuDNN convolutions on the GPU machine: NVRTC compile test, GPU tests, then ResNet-50 fp16
# (exported there by resnet50_peers.py, which also times PyTorch eager / torch.compile) through
# kiln channels-last and channels-first (KILN_CUDA_NCHW=1). Logs under $OUT.
# Here: build the test binaries (release), copy them stripped to <folder>/bin/test-{gpu,nvrtc_compile}
# with this script and resnet50_peers.py beside them. There: mv <folder> .gpu && bash .gpu/cudnn.sh [filter]
set -u
V=/opt/torch/.venv/lib/python3.12/site-packages/nvidia
export LD_LIBRARY_PATH="/usr/local/nvidia/lib64:$V/cu13/lib:$V/cudnn/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
export KILN_CUDA_INCLUDE=/usr/local/cuda/include KILN_REPO="$PWD" KILN_REQUIRE_CUDA=1 KILN_REQUIRE_NVRTC=1
out=${OUT:-/tmp}
nvidia-smi --query-gpu=name,driver_version,memory.used,memory.total --format=csv,noheader
ls "$V/cudnn/lib" | tr '\n' ' '; echo
.gpu/bin/test-nvrtc_compile 2>&1 | tee "$out/nvrtc.log" | grep -E "^test result|panicked"
timeout 200 .gpu/bin/test-gpu --test-threads=1 --nocapture --skip bench ${1:-} 2>&1 | tee "$out/gpu.log" | grep -E "^test .*(FAILED|ok)$|panicked|result|conv tactics" | grep -vE "^test .* ok$" | cut -c1-600
grep -cE "^test .* ok$" "$out/gpu.log"
MODELS=/tmp PYTHONUNBUFFERED=1 timeout 240 /opt/torch/.venv/bin/python .gpu/resnet50_peers.py 2>&1 | tee "$out/peers.log" | grep -E "PEER|exported|Error" | cut -c1-300
for layout in ${LAYOUTS:-nhwc nchw}; do
  [ $layout = nchw ] && export KILN_CUDA_NCHW=1
  KILN_RESNET50_DIR=/tmp timeout 150 .gpu/bin/test-gpu bench_resnet50 --nocapture 2>&1 | tee "$out/resnet_$layout.log" | grep -E "BENCH|panicked|result" | sed "s/^/$layout /" | cut -c1-300
done
