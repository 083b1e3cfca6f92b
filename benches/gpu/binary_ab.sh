#!/usr/bin/env bash
# On the GPU machine: one kiln binary against another on one model, the way a change that is not
# a kernel source alone (a pass, a launcher, a new kernel) is measured. Both builds share one
# timing cache, so layers the change leaves alone keep the same tactics: builds timed apart may
# choose differently and move a whole model by about 2% (QUANT.md, session 49). Builds MODEL
# with binary A, then with B (B after A: a layer B changes gets timed anew, the others read A's
# timings), checks that both engines give the same outputs byte for byte (TOLERANT=1: only says
# how far apart), and times them in ROUNDS (3) interleaved rounds of `kiln bench`, each round's
# median GPU compute time:
#   bash benches/gpu/binary_ab.sh A_KILN B_KILN MODEL INPUTS.npz [kiln build flags...]
# e.g. A_KILN=.gpu/main/kiln (another packed binary carried beside .gpu/bin) and B_KILN=.gpu/bin/kiln.
# Everything lands in $OUT/binary_ab (the build logs list every timed candidate).
set -u
a=$1 b=$2 model=$3 inputs=$4; shift 4
source "$(dirname "$0")/env.sh"
py=${PYTHON:-/opt/torch/.venv/bin/python} out=${OUT:-/tmp}/binary_ab
mkdir -p "$out"
for side in a b; do
  exe=$a; [ $side = b ] && exe=$b
  "$exe" build "$model" -o "$out/$side.kiln" --timing-cache "$out/timing.cache" -v "$@" > "$out/$side.build.log" 2>&1 \
    || { echo "build $side failed: $(tail -3 "$out/$side.build.log")"; exit 1; }
  "$exe" run "$out/$side.kiln" --inputs "$inputs" --save-outputs "$out/$side.npz" -q > /dev/null || { echo "run $side failed"; exit 1; }
done
$py - "$out/a.npz" "$out/b.npz" "${TOLERANT:-0}" <<'PY' || exit 1
import numpy as np, sys
a, b, tolerant = np.load(sys.argv[1]), np.load(sys.argv[2]), sys.argv[3] == "1"
same = a.files == b.files
for k in a.files:
    x, y = a[k], b.get(k)
    if y is None or x.shape != y.shape or x.dtype != y.dtype:
        print(f"{k}: shapes or types differ"); same = False; continue
    if np.array_equal(x, y, equal_nan=True):
        print(f"{k}: equal"); continue
    d = np.abs(x.astype(np.float64) - y.astype(np.float64))
    print(f"{k}: DIFFER, max abs {np.nanmax(d):.3g}, relative L2 {np.linalg.norm(np.nan_to_num(d)) / max(np.linalg.norm(y.astype(np.float64)), 1e-30):.3g}")
    same = False
sys.exit(0 if same or tolerant else 1)
PY
for r in $(seq 1 "${ROUNDS:-3}"); do
  for side in a b; do
    exe=$a; [ $side = b ] && exe=$b
    "$exe" bench "$out/$side.kiln" --inputs "$inputs" --warmup-ms 500 --duration-s "${SECONDS_EACH:-2}" --json "$out/$side.r$r.json" -q > /dev/null 2>&1 \
      || { echo "round $r $side: bench failed"; continue; }
    $py - "$out/$side.r$r.json" "$r" "$side" "$exe" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
g = r.get("gpu_compute_ms") or r["latency_ms"]
print(f"round {sys.argv[2]}  {sys.argv[3]} ({sys.argv[4]}) {g['median']:8.4f} ms")
PY
  done
done
rm -f "$out"/*.npz
