#!/usr/bin/env bash
# Issue #21's INT8 / FP8 baseline on the GPU machine, from the repository root, with the packed
# folder at .gpu/ (see pack.sh):
#   bash benches/gpu/quant.sh [quant.py args, e.g. --only resnet50 | --only bert | --only digits,gemm]
# PYTHON overrides the interpreter (a local smoke test: PYTHON=python3 ... --backend cpu --kiln K).
# Figures and logs go to $OUT (quant.json, quant.txt: the printed table, quant.log: every kiln call).
set -u
source "$(dirname "$0")/env.sh"
out=${OUT:-/tmp}; mkdir -p "$out"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,memory.used --format=csv,noheader
"${PYTHON:-/opt/torch/.venv/bin/python}" benches/gpu/quant.py --kiln .gpu/bin/kiln --out "$out" "$@" 2>&1 | tee "$out/quant.txt"
exit "${PIPESTATUS[0]}"
