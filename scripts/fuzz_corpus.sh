#!/usr/bin/env bash
# Seeds the fuzz corpora from small models and engines in the repository.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p fuzz/corpus/onnx_import fuzz/corpus/engine_load
for m in engine/onnx/tests/data/*/model.onnx; do
  cp "$m" "fuzz/corpus/onnx_import/$(basename "$(dirname "$m")").onnx"
done
cargo build --quiet -p kiln-cli
for m in engine/onnx/tests/data/*/model.onnx; do
  name=$(basename "$(dirname "$m")")
  target/debug/kiln build "$m" -o "fuzz/corpus/engine_load/$name.engine" >/dev/null 2>&1 || true
done
echo "corpus: $(ls fuzz/corpus/onnx_import | wc -l) models, $(ls fuzz/corpus/engine_load | wc -l) engines"
