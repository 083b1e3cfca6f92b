#!/usr/bin/env bash
# Runs kiln's whole test suite on a fresh machine: installs what the tests need, then
# `cargo test --workspace`. This is the command README.md gives and .ci/run calls.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v cargo >/dev/null; then
  echo "error: cargo is not installed (kiln needs a Rust toolchain, 1.89 or newer)" >&2
  exit 1
fi

# A clean clone gains nothing from incremental caches, and full debug info makes each of
# the ~100 test binaries hundreds of MB: together they filled CI's disk (stop 31). Line
# tables keep file:line in panics and backtraces. Both can be overridden from outside.
export CARGO_INCREMENTAL=${CARGO_INCREMENTAL:-0}
export CARGO_PROFILE_DEV_DEBUG=${CARGO_PROFILE_DEV_DEBUG:-line-tables-only}

# The ONNX backend test suite (tests/onnx_backend.rs) needs the onnx package's test data:
# installed from PyPI and written once; without it the conformance run fails, not skips.
eval "$(scripts/onnx_suite_data.sh)"
export KILN_CONFORMANCE_REQUIRE_DATA=1

# kiln-cuda compiles every CUDA kernel with NVRTC from PyPI (no GPU needed); with
# KILN_REQUIRE_NVRTC=1 a missing NVRTC fails that test instead of skipping it.
eval "$(scripts/nvrtc_env.sh)"

# The wgpu backend runs on Mesa's lavapipe (Vulkan on the CPU) where no GPU exists.
if ! dpkg -s mesa-vulkan-drivers >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ]; then
    (apt-get update -q && apt-get install -y -q mesa-vulkan-drivers libvulkan1) >/dev/null \
      || echo "warning: installing mesa-vulkan-drivers failed: the wgpu tests will skip" >&2
  elif command -v sudo >/dev/null && sudo -n true 2>/dev/null; then
    (sudo apt-get update -q && sudo apt-get install -y -q mesa-vulkan-drivers libvulkan1) >/dev/null \
      || echo "warning: installing mesa-vulkan-drivers failed: the wgpu tests will skip" >&2
  else
    echo "note: mesa-vulkan-drivers (lavapipe) is missing and this user cannot install it (not root, no sudo): the wgpu tests will skip" >&2
  fi
fi

# No module may depend on another that depends back on it (ARCHITECTURE.md, "Dependencies");
# the one cycle left in the core is listed as known until it is cut.
python3 scripts/module_cycles.py engine/kiln/src backends/cuda/src backends/wgpu/src backends/cpu/src

# The libraries first: the C API's tests (engine/capi) link C programs against libkiln_capi.so,
# and the Python tests load the extension module, cdylibs that a test build does not make.
cargo build --workspace --lib --locked

# Doctests first: tests below build crates again with other features into the same target
# folder (the backend-library tests build `-p kiln-backend-wgpu`), which can leave a rlib
# built against another kiln; the doctests link those rlibs by path and must see the test
# build's own. GPU tests skip with a message where no device exists.
cargo test --workspace --locked --doc "$@"
cargo test --workspace --locked --lib --bins --tests --examples "$@"

# The ONNX suite once more, on the wgpu backend (lavapipe in CI), with its own
# expectations (tests/conformance/expected_failures_wgpu.txt). The `real/` ImageNet models
# are skipped there: on lavapipe's emulated GPU they take tens of minutes.
# `--workspace` keeps the workspace's feature set, so the build above is reused (with `-p`,
# cargo resolves features anew and rebuilds wgpu).
KILN_CONFORMANCE_BACKEND=wgpu cargo test --workspace --test onnx_backend --locked -- --skip real/

# The Python package's pytest suite, on the extension module the build above made.
if [ $# -eq 0 ]; then
  scripts/python_tests.sh
fi

# Every fuzz target briefly (cargo-fuzz, installed from crates.io if missing): 4,000
# inputs each from a fixed seed over seeds from the repository, so the run is the same
# on every machine; a crash fails it. Longer runs: `scripts/fuzz.sh SECONDS`.
# With arguments (a test filter), only the cargo tests above run.
if [ $# -eq 0 ]; then
  FUZZ_RUNS=4000 scripts/fuzz.sh
fi
