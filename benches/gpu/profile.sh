#!/usr/bin/env bash
# On the GPU machine, after benches/gpu/run.sh built its engines: where one execution of an
# engine spends its GPU time, kernel by kernel (Nsight Compute's per-launch durations, summed by
# kernel name), and the engine's layers (`kiln inspect`). Output goes to stdout and $OUT.
#   bash benches/gpu/profile.sh /tmp/kiln-bench/bert_b32_fp16.kiln /tmp/kiln-bench/bert_b32_in.npz [top]
set -u
engine=$1 inputs=$2 top=${3:-25}
source "$(dirname "$0")/env.sh"
out=${OUT:-/tmp}; name=$(basename "$engine" .kiln)
.gpu/bin/kiln inspect "$engine" --verbosity detailed > "$out/$name.inspect.txt" 2>&1
# One `kiln run` is one execution (no CUDA graph: the first run is interpreted). Being the
# first, it also converts constant weights once (an INT8 product's [K, N] weights transposed
# to [N, K]: `transpose_tiled_u8` before each product), which later runs reuse: leave those out
# of a steady-state figure.
/usr/local/cuda/bin/ncu --metrics gpu__time_duration.sum --csv --print-units base \
  .gpu/bin/kiln run "$engine" --inputs "$inputs" > "$out/$name.ncu.csv" 2> "$out/$name.ncu.err"
/opt/torch/.venv/bin/python - "$out/$name.ncu.csv" "$top" <<'EOF'
import csv, sys, collections
rows = [l for l in open(sys.argv[1]) if l.startswith('"')]
total, count = collections.Counter(), collections.Counter()
for r in csv.DictReader(rows):
    if r.get("Metric Name") != "gpu__time_duration.sum":
        continue
    name = r["Kernel Name"].split("(")[0][:70]
    total[name] += float(r["Metric Value"].replace(",", "")) / 1e3
    count[name] += 1
all_us = sum(total.values())
print(f"{sum(count.values())} launches, {all_us / 1e3:.3f} ms of kernel time")
for name, us in total.most_common(int(sys.argv[2])):
    print(f"{us / 1e3:9.3f} ms {100 * us / all_us:5.1f}% {count[name]:5d}x  {name}")
EOF
