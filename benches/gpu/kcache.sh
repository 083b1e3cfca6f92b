#!/usr/bin/env bash
# On the GPU machine, at the end of a call: saves the kernel cache as $OUT/kcache.tgz, so the
# next calls carry it (copy it to .gpu/kcache.tgz here; pack.sh keeps it) and env.sh restores it
# on a fresh machine. A returned file may be 16 MiB at most; the whole cache was 3.5 MB in
# session 50.
#   bash benches/gpu/kcache.sh save
set -euo pipefail
[ "${1:-}" = save ] || { echo "usage: kcache.sh save" >&2; exit 2; }
dir=${XDG_CACHE_HOME:-$HOME/.cache}/kiln
[ -d "$dir/kernels" ] || { echo "kcache.sh: no kernel cache at $dir/kernels" >&2; exit 1; }
out=${OUT:-/tmp}/kcache.tgz
tar czf "$out" -C "$dir" kernels
bytes=$(stat -c %s "$out")
echo "kcache.sh: $(ls "$dir/kernels" | wc -l) kernels, $bytes bytes in $out"
[ "$bytes" -le $((16 * 1024 * 1024)) ] || echo "kcache.sh: over the 16 MiB a returned file may have: it will not come back" >&2
