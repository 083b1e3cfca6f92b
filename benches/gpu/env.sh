# Sourced by the GPU machine's scripts in this folder, from the repository root: the CUDA
# libraries kiln loads (the PyTorch environment's CUDA 13, cuDNN and cuSPARSELt), kiln's kernel
# headers, and the kernel cache a previous call saved (`kcache.sh save`, carried back as
# .gpu/kcache.tgz): a fresh machine then compiles only the kernel sources changed since, where it
# spent 47-65 s compiling every source before its first build or GPU test.
V=/opt/torch/.venv/lib/python3.12/site-packages/nvidia
export LD_LIBRARY_PATH="/usr/local/nvidia/lib64:$V/cu13/lib:$V/cudnn/lib:$V/cusparselt/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
export KILN_CUDA_INCLUDE=${KILN_CUDA_INCLUDE:-/usr/local/cuda/include} KILN_REPO="$PWD"
kiln_cache_dir=${XDG_CACHE_HOME:-$HOME/.cache}/kiln
# Unpacked once a machine (the marker), and only into the default cache folder: a run that names
# its own (KILN_KERNEL_CACHE) keeps it.
if [ -f .gpu/kcache.tgz ] && [ -z "${KILN_KERNEL_CACHE:-}" ] && [ ! -e "$kiln_cache_dir/.restored" ]; then
  mkdir -p "$kiln_cache_dir" && tar xzf .gpu/kcache.tgz -C "$kiln_cache_dir" && touch "$kiln_cache_dir/.restored" \
    && echo "env.sh: kernel cache restored ($(ls "$kiln_cache_dir/kernels" | wc -l) kernels)" >&2
fi
