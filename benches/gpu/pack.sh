#!/usr/bin/env bash
# Here (no GPU needed): builds the release `kiln` binary and the cuda GPU test binary into
# .gpu/bin for the GPU machine, which has no Rust toolchain. Then, there:
#   bash benches/gpu/run.sh [harness args]
# --dev builds the dev profile instead (faster to build; kiln's own crates at opt-level 1).
set -euo pipefail
profile=release; dir=release
if [ "${1:-}" = "--dev" ]; then profile=dev; dir=debug; fi
root=$(git rev-parse --show-toplevel); cd "$root"
# A kernel cache carried from an earlier call (kcache.sh, env.sh) stays.
kcache=$(mktemp); [ -f .gpu/kcache.tgz ] && cp .gpu/kcache.tgz "$kcache"
rm -rf .gpu; mkdir -p .gpu/bin
[ -s "$kcache" ] && cp "$kcache" .gpu/kcache.tgz; rm -f "$kcache"
cargo build --profile $profile -p kiln-cli
cp target/$dir/kiln .gpu/bin/kiln
exe=$(cargo test --profile $profile -p kiln-cuda --test gpu --no-run --message-format=json 2>/dev/null | python3 -c '
import json, sys
for line in sys.stdin:
    try: m = json.loads(line)
    except ValueError: continue
    if m.get("reason") == "compiler-artifact" and m.get("executable"): print(m["executable"])' | tail -1)
[ -n "$exe" ] && cp "$exe" .gpu/bin/test-gpu
strip .gpu/bin/*
du -sh .gpu
