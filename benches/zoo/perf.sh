#!/usr/bin/env bash
# One self-contained perf pass on the GPU machine (one device command, at most 10 minutes): time
# kiln against PyTorch eager / torch.compile on the models matching REGEX (perf.py list), for
# about budget-s seconds, then write the report of everything done so far to $OUT/PERF.md and
# print its summary. /tmp/perf survives between commands of one machine lease: the same command
# again carries on where the last one stopped. With several GPUs the models are spread over them.
#   bash benches/zoo/perf.sh REGEX [budget-s] [more perf.py run options, e.g. --exporters dynamo]
set -u
filter=${1:?usage: perf.sh REGEX [budget-s] [perf.py run options]}; budget=${2:-380}; shift $(( $# < 2 ? $# : 2 ))
py=/opt/torch/.venv/bin/python; [ -x "$py" ] || py=python3
export PYTHONUNBUFFERED=1
out=${OUT:-/tmp/perf-out}; work=/tmp/perf; mkdir -p "$out" "$work"
device=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,memory.used --format=csv,noheader
# Hard limit past the budget: perf.py lets a started kiln command run up to 120 s over it, and the
# report must still be written inside the 10 minutes (work cut short stays unrecorded).
# On a machine of several GPUs (PERF_GPUS, default: all of them) each GPU takes every N-th model,
# one perf.py per GPU, all writing into /tmp/perf (their models differ; the timing cache is shared
# under its lock). The figures of one model, kiln's and PyTorch's, still come from one GPU.
gpus=${PERF_GPUS:-$(nvidia-smi -L | wc -l)}; [ "$gpus" -ge 1 ] || gpus=1
for ((i = 0; i < gpus; i++)); do
  shard=(); [ "$gpus" -gt 1 ] && shard=(--shard "$i/$gpus")
  log="$out/perf-run.log"; [ "$gpus" -gt 1 ] && log="$out/perf-run-$i.log"
  CUDA_VISIBLE_DEVICES=$i timeout $((budget + 150)) "$py" benches/zoo/perf.py run --kiln .gpu/bin/kiln --work "$work" \
    --filter "$filter" --budget "$budget" "${shard[@]}" "$@" > "$log" 2>&1 &
done
wait
# One log comes back (a device call returns at most 8 files).
if [ "$gpus" -gt 1 ]; then
  for ((i = 0; i < gpus; i++)); do echo "=== GPU $i"; cat "$out/perf-run-$i.log"; rm -f "$out/perf-run-$i.log"; done > "$out/perf-run.log"
fi
grep -E '^(===|perf:|  )' "$out/perf-run.log" | tail -n $((12 * gpus))
"$py" benches/zoo/perf.py report --work "$work" --out "$out/PERF.md" --device "$device"
# The small files (results, PyTorch figures, kiln logs), to merge the reports of several leases.
tar czf "$out/perf-results.tgz" -C "$work" --exclude='*.onnx' --exclude='*.data' --exclude='*.npz' \
  --exclude='*.kiln' --exclude='timing.cache' .
