#!/usr/bin/env bash
# One self-contained zoo pass on the GPU machine (a lease's /tmp does not outlive it):
# export the cases matching $1, run kiln (cpu, cuda fp32/fp16) and onnxruntime on them, and
# leave the report and every case's small result files in $OUT.
#   bash benches/zoo/device.sh REGEX [export-budget-s] [run-budget-s]
# On a machine of many GPUs and cores: ZOO_GPUS=8 ZOO_JOBS=120 (jobs spread over the GPUs by case).
set -u
filter=$1; export_budget=${2:-230}; run_budget=${3:-250}
py=/opt/torch/.venv/bin/python; [ -x "$py" ] || py=python3
export PYTHONUNBUFFERED=1
out=${OUT:-/tmp/zoo-out}; mkdir -p "$out"; root=/tmp/zoo
jobs=${ZOO_JOBS:-16}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
# Hard limits a little past the budgets: a device command must end inside its 10 minutes
# with the report written (unfinished jobs stay unrecorded).
timeout $((export_budget + 40)) "$py" benches/zoo/zoo.py export --out "$root" --filter "$filter" --jobs "$jobs" --timeout 150 --budget "$export_budget" > "$out/export.log" 2>&1
tail -n 3 "$out/export.log"
# One process compiles kiln's CUDA kernels into the shared kernel cache before the jobs start,
# rather than every job at once.
LD_LIBRARY_PATH=$(cd benches/zoo && "$py" -c 'import run_case; print(run_case.kiln_env("fp32")["LD_LIBRARY_PATH"])') \
  KILN_CUDA_INCLUDE=/usr/local/cuda/include .gpu/bin/kiln run examples/models/mnist.onnx --backend cuda -q > /dev/null 2>&1
timeout $((run_budget + 40)) "$py" benches/zoo/zoo.py run --dir "$root" --filter "$filter" --kiln .gpu/bin/kiln --backends cpu,cuda --jobs "$(( jobs > 2 ? jobs - 2 : 1 ))" --timeout 120 --budget "$run_budget" > "$out/run.log" 2>&1
tail -n 3 "$out/run.log"
"$py" benches/zoo/zoo.py report --dir "$root" --out "$out/RESULTS.md" --device "$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
tar czf "$out/results.tgz" -C "$root" --exclude='*.onnx' --exclude='*.data' --exclude='*.npz' --exclude='*.engine' .
head -n 30 "$out/RESULTS.md"
