#!/usr/bin/env bash
# Runs the Python package's tests (python/tests) against the extension module that
# `cargo build --workspace` builds (target/debug/lib_kiln.so): numpy and pytest are installed
# into .venv-python, the module is copied in as python/kiln/_kiln.abi3.so (ignored by git).
# Users install the package with `pip install ./python` (README, "Python package").
set -euo pipefail
cd "$(dirname "$0")/.."
venv=.venv-python
if ! "$venv/bin/python" -c "import numpy, pytest" 2>/dev/null; then
  echo "python_tests: installing numpy and pytest into $venv" >&2
  python3 -m venv "$venv" >&2
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check numpy pytest >&2
fi
cargo build --quiet --workspace --locked
cp target/debug/lib_kiln.so python/kiln/_kiln.abi3.so
PYTHONPATH="$PWD/python" "$venv/bin/python" -m pytest -q python/tests
