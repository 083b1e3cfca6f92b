#!/usr/bin/env bash
# On the GPU machine: one engine run with each variant folder of CUDA kernel sources
# (KILN_CUDA_KERNEL_DIR: files there replace the embedded ones of the same name), on the same card,
# so a kernel change is tried without rebuilding kiln:
#   bash benches/gpu/kernel_ab.sh ENGINE INPUTS.npz VARIANT [VARIANT ...]
# where a VARIANT is a DIR, or `env:NAME=VALUE` (the embedded kernels with that variable set, for a
# launcher's switch); no VARIANT: the embedded kernels alone. Each folder's outputs must equal the first one's byte for
# byte (the variants change speed, not values; TIME_ANYWAY=1 still times one that differs, for a
# variant wrong on purpose that bounds what a change could gain); then ROUNDS rounds of `kiln bench` interleave them
# (each bench's median GPU compute time, every round printed: noise shows as the rounds' spread).
# With PROFILE=1 each also writes its per-layer profile (`kiln bench --export-profile`) and the
# layer time by tactic is printed, variant beside variant. A variant holding a header (common.cuh)
# recompiles every kernel on its first run (about 100 s on the H200): give it the time. Everything
# lands in $OUT/kernel_ab.tgz.
set -u
engine=$1 inputs=$2; shift 2
source "$(dirname "$0")/env.sh"
py=/opt/torch/.venv/bin/python kiln=.gpu/bin/kiln out=${OUT:-/tmp}/kernel_ab
mkdir -p "$out"
names=() dirs=()
for d in "$@"; do
  case "$d" in
    env:*) names+=("${d#env:}"); dirs+=("$d") ;;
    *) names+=("$(basename "$d")"); dirs+=("$(cd "$d" && pwd)") ;;
  esac
done
[ ${#names[@]} -gt 0 ] || { names=(embedded); dirs=(""); }
with_dir() {
  case "$1" in
    env:*) env "${1#env:}" "${@:2}" ;;
    *) KILN_CUDA_KERNEL_DIR="$1" "${@:2}" ;;
  esac
}

ok=()
for i in "${!names[@]}"; do
  if with_dir "${dirs[$i]}" $kiln run "$engine" --inputs "$inputs" --save-outputs "$out/${names[$i]}.npz" -q 2> "$out/${names[$i]}.run.err"; then
    if [ "$i" = 0 ]; then ok+=(1); continue; fi
    if $py -c 'import numpy as np, sys
a, b = np.load(sys.argv[1]), np.load(sys.argv[2])
sys.exit(0 if a.files == b.files and all(a[k].dtype == b[k].dtype and np.array_equal(a[k], b[k], equal_nan=True) for k in a.files) else 1)' \
       "$out/${names[0]}.npz" "$out/${names[$i]}.npz"; then ok+=(1); else echo "${names[$i]}: OUTPUTS DIFFER from ${names[0]}'s"; ok+=("${TIME_ANYWAY:-0}"); fi
  else
    echo "${names[$i]}: run failed: $(tail -3 "$out/${names[$i]}.run.err")"; ok+=(0)
  fi
done

for r in $(seq 1 "${ROUNDS:-3}"); do
  for i in "${!names[@]}"; do
    [ "${ok[$i]}" = 1 ] || continue
    json="$out/${names[$i]}.r$r.json"
    with_dir "${dirs[$i]}" $kiln bench "$engine" --inputs "$inputs" --warmup-ms 500 --duration-s "${SECONDS_EACH:-2}" --json "$json" -q > /dev/null 2>&1
    $py - "$json" "$r" "${names[$i]}" <<'EOF' || echo "round $r  ${names[$i]}: bench failed"
import json, sys
r = json.load(open(sys.argv[1]))
g = r.get("gpu_compute_ms") or {}
print(f"round {sys.argv[2]}  {sys.argv[3]:<24} {g.get('median', r['latency_ms']['median']):8.3f} ms")
EOF
  done
done

if [ "${PROFILE:-0}" = 1 ]; then
  for i in "${!names[@]}"; do
    [ "${ok[$i]}" = 1 ] || continue
    with_dir "${dirs[$i]}" $kiln bench "$engine" --inputs "$inputs" --duration-s 1 --export-profile "$out/${names[$i]}.profile.json" -q > /dev/null 2>&1
  done
  # Each variant's layer time by tactic (the profile runs' medians, summed), beside the others'.
  $py - "$out" "${names[@]}" <<'EOF'
import collections, json, os, sys
out, names = sys.argv[1], sys.argv[2:]
by = {}
for n in names:
    p = os.path.join(out, f"{n}.profile.json")
    if os.path.exists(p):
        t = collections.Counter()
        for l in json.load(open(p))["layers"]:
            t[l["tactic"].split(" ")[0][:48]] += l["median_ms"]
        by[n] = t
if by:
    first = next(iter(by.values()))
    print(f"{'tactic (ms, summed)':<50}" + "".join(f"{n[:14]:>15}" for n in by))
    for tactic, _ in first.most_common(int(os.environ.get("TOP", "12"))):
        print(f"{tactic:<50}" + "".join(f"{t.get(tactic, 0):15.3f}" for t in by.values()))
    print(f"{'all layers':<50}" + "".join(f"{sum(t.values()):15.3f}" for t in by.values()))
EOF
fi
# Few files travel back from the device tool: the folder as one archive, without the outputs.
rm -f "$out"/*.npz
tar -C "$out" -czf "$out.tgz" . && rm -rf "$out"
