#!/usr/bin/env bash
# One self-contained perf pass on the GPU machine (one device command, at most 10 minutes): time
# kiln against PyTorch eager / torch.compile on the models matching REGEX (perf.py list), for
# about budget-s seconds, then write the report of everything done so far to $OUT/PERF.md and
# print its summary. /tmp/perf survives between commands of one machine lease: the same command
# again carries on where the last one stopped.
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
timeout $((budget + 150)) "$py" benches/zoo/perf.py run --kiln .gpu/bin/kiln --work "$work" --filter "$filter" \
  --budget "$budget" "$@" > "$out/perf-run.log" 2>&1
grep -E '^(perf:|  )' "$out/perf-run.log" | tail -n 12
"$py" benches/zoo/perf.py report --work "$work" --out "$out/PERF.md" --device "$device"
# The small files (results, PyTorch figures, kiln logs), to merge the reports of several leases.
tar czf "$out/perf-results.tgz" -C "$work" --exclude='*.onnx' --exclude='*.data' --exclude='*.npz' \
  --exclude='*.kiln' --exclude='timing.cache' .
