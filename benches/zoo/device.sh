#!/usr/bin/env bash
# One zoo pass on the GPU machine: export the cases matching $1 and, as they land, run kiln (cpu,
# cuda fp32/fp16) and onnxruntime on them; leave the report and every case's small result files
# in $OUT. Export and run overlap (the exporter is CPU-bound, the cuda jobs GPU-bound).
#   bash benches/zoo/device.sh REGEX [budget-s]
# Everything is resumable in /tmp/zoo, which lives as long as the machine: the same command run
# again on the same machine carries on where the last one stopped.
# ZOO_SEED=FILE.tgz (an earlier machine's results.tgz, carried) seeds a fresh machine's /tmp/zoo, so
# a zoo larger than one machine's lease goes on across machines. ZOO_SHARD=K/N takes every N-th case from the K-th (one machine's part of the whole zoo);
# on a machine of many GPUs and cores: ZOO_GPUS=8 ZOO_JOBS=120 (jobs spread over the GPUs by case).
set -u
filter=$1; budget=${2:-520}
py=/opt/torch/.venv/bin/python; [ -x "$py" ] || py=python3
export PYTHONUNBUFFERED=1
out=${OUT:-/tmp/zoo-out}; mkdir -p "$out"; root=/tmp/zoo
jobs=${ZOO_JOBS:-16}
shard=(); [ -n "${ZOO_SHARD:-}" ] && shard=(--shard "$ZOO_SHARD")
start=$(date +%s)
left() { echo $((budget - ($(date +%s) - start))); }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
if [ ! -d "$root" ] && [ -f "${ZOO_SEED:-}" ]; then "$py" benches/zoo/zoo.py resume --dir "$root" --tgz "$ZOO_SEED"; fi
# Hard limits a little past the budget: a device command must end inside its 10 minutes with the
# report written (unfinished jobs stay unrecorded and are redone by the next pass).
timeout $((budget + 20)) "$py" benches/zoo/zoo.py export --out "$root" --filter "$filter" "${shard[@]}" \
  --jobs $((jobs * 3 / 4)) --timeout 200 --budget $((budget - 30)) >> "$out/export.log" 2>&1 &
exporter=$!
# One process compiles kiln's CUDA kernels into the shared kernel cache before the jobs start,
# rather than every job at once.
LD_LIBRARY_PATH=$(cd benches/zoo && "$py" -c 'import run_case; print(run_case.kiln_env("fp32")["LD_LIBRARY_PATH"])') \
  KILN_CUDA_INCLUDE=/usr/local/cuda/include .gpu/bin/kiln run examples/models/mnist.onnx --backend cuda -q > /dev/null 2>&1
# Run passes until the export has ended and one pass has seen everything it left.
while [ "$(left)" -gt 30 ]; do
  exporting=0; kill -0 $exporter 2>/dev/null && exporting=1
  pass=$(date +%s)
  timeout $(($(left) + 20)) "$py" benches/zoo/zoo.py run --dir "$root" --filter "$filter" --kiln .gpu/bin/kiln \
    --backends cpu,cuda --jobs "$jobs" --timeout 240 --budget $(($(left) - 10)) >> "$out/run.log" 2>&1
  "$py" benches/zoo/zoo.py prune --dir "$root" >> "$out/run.log" 2>&1
  [ $exporting = 0 ] && break
  [ $(($(date +%s) - pass)) -lt 20 ] && sleep 15  # little was exported since the last pass
done
wait $exporter
grep -h '^export:' "$out/export.log" | tail -n 2; grep -h '^run:' "$out/run.log" | tail -n 2; df -h /tmp | tail -n 1
"$py" benches/zoo/zoo.py report --dir "$root" --out "$out/RESULTS.md" --device "$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
# The small result files only (the logs of 334 cases passed the 16 MB a device call returns).
tar czf "$out/results.tgz" -C "$root" --exclude='*.onnx' --exclude='*.data' --exclude='*.npz' --exclude='*.engine' --exclude='*.log' .
ls -l "$out/results.tgz"
head -n 12 "$out/RESULTS.md"
"$py" benches/zoo/zoo.py left --dir "$root" --filter "$filter" "${shard[@]}"
