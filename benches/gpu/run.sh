#!/usr/bin/env bash
# On the GPU machine, from the repository root, with the packed folder at .gpu/ (see pack.sh):
#   bash benches/gpu/run.sh [harness args, e.g. --models resnet50 --batches 128]
# Figures and logs go to $OUT (bench.json, harness.log).
set -u
source "$(dirname "$0")/env.sh"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,memory.used --format=csv,noheader
/opt/torch/.venv/bin/python benches/gpu/harness.py --kiln .gpu/bin/kiln --out "${OUT:-/tmp}" \
  --gpu-tests "$(ls .gpu/bin/test-gpu 2>/dev/null)" "$@"
