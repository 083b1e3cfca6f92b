#!/usr/bin/env bash
# On the GPU machine: one tactic against another on the layers that time both, in one model.
# Builds MODEL with TIMING_CACHE (the builder's own choices: engine A), then B from a copy of the
# cache whose entries that timed tactic NAME are set to OTHER instead, checks that both give the
# same outputs within the tolerance of `kiln compare` (or byte for byte with EXACT=1), and times
# them in ROUNDS interleaved rounds of `kiln bench` (each round's median GPU compute time):
#   bash benches/gpu/tactic_ab.sh MODEL INPUTS.npz TIMING_CACHE NAME OTHER [kiln build flags...]
# Everything lands in $OUT/tactic_ab (both engines' `-v` build logs list every timed candidate).
set -u
model=$1 inputs=$2 cache=$3 name=$4 other=$5; shift 5
source "$(dirname "$0")/env.sh"
py=/opt/torch/.venv/bin/python kiln=.gpu/bin/kiln out=${OUT:-/tmp}/tactic_ab
mkdir -p "$out"
$kiln build "$model" -o "$out/a.kiln" --timing-cache "$cache" -v "$@" > "$out/a.build.log" 2>&1 || { echo "build A failed: $(tail -3 "$out/a.build.log")"; exit 1; }
cp "$cache" "$out/b.cache"
$kiln cache show "$out/b.cache" --json "$out/cache.json" > /dev/null
keys=$($py -c 'import json, sys
for e in json.load(open(sys.argv[1]))["entries"]:
    if any(c["tactic"].split("@")[0].endswith("/" + sys.argv[2]) for c in e["candidates"]): print(e["key"])' "$out/cache.json" "$name")
[ -n "$keys" ] || { echo "no entry of the cache timed $name"; exit 1; }
while read -r key; do
  $kiln cache edit "$out/b.cache" "$key" "$other" > /dev/null || { echo "cache edit of $key failed"; exit 1; }
done <<< "$keys"
echo "$(wc -l <<< "$keys") layer signature(s) timed $name; B runs $other there"
$kiln build "$model" -o "$out/b.kiln" --timing-cache "$out/b.cache" -v "$@" > "$out/b.build.log" 2>&1 || { echo "build B failed: $(tail -3 "$out/b.build.log")"; exit 1; }
for e in a b; do $kiln run "$out/$e.kiln" --inputs "$inputs" --save-outputs "$out/$e.npz" -q || exit 1; done
$py - "$out/a.npz" "$out/b.npz" "${EXACT:-0}" <<'PY' || { echo "OUTPUTS DIFFER"; exit 1; }
import numpy as np, sys
a, b = np.load(sys.argv[1]), np.load(sys.argv[2])
exact = sys.argv[3] == "1"
for k in a.files:
    same = np.array_equal(a[k], b[k])
    x, y = a[k].astype(np.float64), b[k].astype(np.float64)
    rel = np.linalg.norm(x - y) / max(np.linalg.norm(y), 1e-30)
    print(f"output {k}:", "byte-equal" if same else f"rel L2 {rel:.3e}")
    if exact and not same:
        sys.exit(1)
PY
for r in $(seq 1 "${ROUNDS:-3}"); do
  for e in a b; do
    $kiln bench "$out/$e.kiln" --inputs "$inputs" --warmup-ms 500 --duration-s "${SECONDS_EACH:-2}" --json "$out/$e.r$r.json" -q > /dev/null 2>&1
    $py - "$out/$e.r$r.json" "$r" "$e" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
g = r.get("gpu_compute_ms") or {}
print(f"round {sys.argv[2]}  {sys.argv[3]}  {g.get('median', r['latency_ms']['median']):8.3f} ms")
PY
  done
done
