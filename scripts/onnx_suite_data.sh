#!/usr/bin/env bash
# Provides the ONNX backend test suite data for the in-repo conformance runner (tests/).
# Installs onnx 1.23.2 + numpy into .venv-onnx (or uses $KILN_ONNX_PYTHON, a python that
# already has that onnx), writes the generated `node` cases once into .onnx-data/, and
# prints the variables to export on stdout; progress goes to stderr. Usage:
#   eval "$(scripts/onnx_suite_data.sh)"
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
onnx_version=1.23.2

log() { echo "onnx_suite_data: $*" >&2; }

has_onnx() {
  "$1" -c "import onnx, numpy, sys; sys.exit(onnx.__version__ != '$onnx_version')" 2>/dev/null
}

python=${KILN_ONNX_PYTHON:-}
if [[ -n "$python" ]]; then
  has_onnx "$python" || { log "error: $python has no onnx $onnx_version"; exit 1; }
else
  venv="$root/.venv-onnx"
  python="$venv/bin/python"
  if ! has_onnx "$python"; then
    log "installing onnx==$onnx_version and numpy into $venv"
    if python3 -m venv "$venv" >&2 2>/dev/null; then
      "$python" -m pip install --quiet --disable-pip-version-check "onnx==$onnx_version" numpy >&2
    else
      # No venv module (Debian without python3-venv): a plain target directory instead.
      log "python3 -m venv is unavailable; installing into $venv/site instead"
      rm -rf "$venv" && mkdir -p "$venv/bin"
      python3 -m pip install --quiet --disable-pip-version-check --target "$venv/site" \
        "onnx==$onnx_version" numpy >&2
      printf '#!/bin/sh\nPYTHONPATH="%s/site${PYTHONPATH:+:$PYTHONPATH}" exec python3 "$@"\n' "$venv" > "$python"
      chmod +x "$python"
    fi
    has_onnx "$python" || { log "error: onnx $onnx_version did not install"; exit 1; }
  fi
fi

node_dir="$root/.onnx-data/onnx-$onnx_version/node"
"$python" scripts/onnx_materialize_node.py "$node_dir" >&2
data_dir=$("$python" -c "import os, onnx.backend.test as t; print(os.path.join(os.path.dirname(t.__file__), 'data'))")
[[ -d "$data_dir/pytorch-converted" ]] || { log "error: $data_dir has no model suites"; exit 1; }

printf 'export KILN_ONNX_NODE_DATA=%q\n' "$node_dir"
printf 'export KILN_ONNX_DATA=%q\n' "$data_dir"
