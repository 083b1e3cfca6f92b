#!/usr/bin/env bash
# Runs kiln's whole test suite on a fresh machine: installs what the tests need, then
# `cargo test --workspace`. This is the command README.md gives and .ci/run calls.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v cargo >/dev/null; then
  echo "error: cargo is not installed (kiln needs a Rust toolchain, 1.85 or newer)" >&2
  exit 1
fi

# The ONNX backend test suite (tests/onnx_backend.rs) needs the onnx package's test data:
# installed from PyPI and written once; without it the conformance run fails, not skips.
eval "$(scripts/onnx_suite_data.sh)"
export KILN_CONFORMANCE_REQUIRE_DATA=1

# kiln-cuda compiles every CUDA kernel with NVRTC from PyPI (no GPU needed); with
# KILN_REQUIRE_NVRTC=1 a missing NVRTC fails that test instead of skipping it.
eval "$(scripts/nvrtc_env.sh)"

# GPU tests skip with a message where no device exists.
cargo test --workspace --locked "$@"
