#!/usr/bin/env bash
# Runs kiln's whole test suite on a fresh machine: installs what the tests need, then
# `cargo test --workspace`. This is the command README.md gives and .ci/run calls.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v cargo >/dev/null; then
  echo "error: cargo is not installed (kiln needs a Rust toolchain, 1.85 or newer)" >&2
  exit 1
fi

# GPU tests skip with a message where no device exists; nothing else needs installing yet.
cargo test --workspace --locked "$@"
