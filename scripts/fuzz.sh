#!/usr/bin/env bash
# Runs every cargo-fuzz target for SECONDS each (default 30) on seeds from the repository;
# a crash fails the script and leaves its input in fuzz/artifacts/TARGET/. The closing
# note of a change to a parser runs it for an hour per target.
#   scripts/fuzz.sh [SECONDS] [TARGET…]
# With FUZZ_RUNS=N, each target runs N inputs from a fixed seed instead: the same inputs
# on every machine, so CI's brief run passes or fails the same way each time.
# Installs cargo-fuzz from crates.io when it is missing. The stable toolchain builds the
# instrumented binaries with RUSTC_BOOTSTRAP=1; no sanitizer (kiln's unsafe code is FFI
# to GPU drivers, which the fuzzed paths do not reach), so a crash is a panic, an abort,
# a timeout (-timeout) or running out of the memory limit (-rss_limit_mb).
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-30}
shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(engine_load onnx_import onnx_attributes timing_cache_load npz_read)

if ! cargo fuzz --version >/dev/null 2>&1; then
  echo "fuzz: installing cargo-fuzz" >&2
  cargo install --quiet --locked cargo-fuzz
fi
export RUSTC_BOOTSTRAP=1

seed() {
  local target=$1 dir=fuzz/corpus/$1
  mkdir -p "$dir"
  case $target in
    onnx_import)
      for m in engine/onnx/tests/data/*/model.onnx; do cp "$m" "$dir/$(basename "$(dirname "$m")").onnx"; done ;;
    npz_read)
      # The archives, and their first arrays as lone .npy files (--inputs x.npy, --load-inputs).
      for f in $(git ls-files '*.npz'); do
        cp "$f" "$dir/"
        python3 -c 'import sys, zipfile; z = zipfile.ZipFile(sys.argv[1]); sys.stdout.buffer.write(z.read(z.namelist()[0]))' \
          "$f" > "$dir/$(basename "$f" .npz).npy"
      done ;;
    engine_load | timing_cache_load)
      # Engines and a timing cache the CLI writes from the repository's small models.
      # `--workspace` keeps the test build's features, so CI reuses its kiln binary.
      cargo build --quiet --workspace
      for m in engine/onnx/tests/data/*/model.onnx; do
        name=$(basename "$(dirname "$m")")
        if [ "$target" = engine_load ]; then
          target/debug/kiln build --backend cpu "$m" -o "$dir/$name.engine" >/dev/null 2>&1 || true
        else
          # Written in the scratch folder, which also takes the cache's `.lock` file.
          target/debug/kiln build --backend cpu "$m" -o "$scratch/engine" --timing-cache "$scratch/$name.cache" >/dev/null 2>&1 \
            && cp "$scratch/$name.cache" "$dir/" || true
        fi
      done
      if [ "$target" = engine_load ]; then
        # Refittable and weight-stripped engines: their Refit section (format 7).
        for m in tests/data/pytorch/cnn_dynamo.onnx tests/data/pytorch/bert_torchscript.onnx tests/data/pytorch/loop_list.onnx; do
          name=$(basename "$m" .onnx)
          target/debug/kiln build --backend cpu "$m" --flag refit -o "$dir/$name-refit.engine" >/dev/null 2>&1 || true
          target/debug/kiln build --backend cpu "$m" --flag refit --flag strip_weights -o "$dir/$name-stripped.engine" >/dev/null 2>&1 || true
        done
      fi ;;
    onnx_attributes) head -c 64 /dev/zero > "$dir/zeros" ;;
  esac
}

scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
failed=()
for target in "${targets[@]}"; do
  seed "$target"
  if [ -n "${FUZZ_RUNS:-}" ]; then
    budget=(-runs="$FUZZ_RUNS" -seed=1)
    echo "fuzz: $target, $FUZZ_RUNS inputs (seed 1) from $(ls "fuzz/corpus/$target" | wc -l) seeds" >&2
  else
    budget=(-max_total_time="$seconds")
    echo "fuzz: $target for ${seconds}s on $(ls "fuzz/corpus/$target" | wc -l) seeds" >&2
  fi
  if ! (cd fuzz && cargo fuzz run --sanitizer none "$target" -- \
      "${budget[@]}" -timeout=20 -rss_limit_mb=4096 -print_final_stats=1 2>&1 | tail -n 12); then
    failed+=("$target")
  fi
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzz: crashes in ${failed[*]} (inputs under fuzz/artifacts/)" >&2
  exit 1
fi
