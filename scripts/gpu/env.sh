# Sourced by the scripts beside it on the GPU machine, from the repository root with .gpu/
# packed: the CUDA libraries of the torch venv on the loader path, and `kiln`, `py` for them.
V=/opt/torch/.venv/lib/python3.12/site-packages/nvidia
export LD_LIBRARY_PATH="/usr/local/nvidia/lib64:$V/cu13/lib:$V/cudnn/lib:$V/cusparselt/lib:/usr/local/cuda/lib64:$PWD/.gpu/lib:${LD_LIBRARY_PATH:-}"
export KILN_CUDA_INCLUDE=${KILN_CUDA_INCLUDE:-/usr/local/cuda/include}
kiln="$PWD/.gpu/bin/kiln"
py=/opt/torch/.venv/bin/python
