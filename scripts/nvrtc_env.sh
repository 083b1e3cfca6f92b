#!/usr/bin/env bash
# Provides NVRTC 13.0 and the CUDA headers from PyPI (no GPU or CUDA install needed), so the
# kiln-cuda test that compiles every kernel for sm_80 and sm_90 runs in CI. Installs into
# .venv-nvrtc once and prints the variables to export on stdout; progress goes to stderr:
#   eval "$(scripts/nvrtc_env.sh)"
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
venv="$root/.venv-nvrtc"
pkgs=(nvidia-cuda-nvrtc==13.0.88 nvidia-cuda-runtime==13.0.96 nvidia-cuda-crt==13.0.88)
log() { echo "nvrtc_env: $*" >&2; }

site() { ls -d "$venv"/lib/python3*/site-packages 2>/dev/null | head -n1 || true; }
if [[ ! -e "$venv/.complete" ]]; then
  log "installing ${pkgs[*]} into $venv"
  rm -rf "$venv"
  if python3 -m venv "$venv" >&2 2>/dev/null; then
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check "${pkgs[@]}" >&2
  else
    # No venv module (Debian without python3-venv): a plain target directory instead.
    mkdir -p "$venv/lib/python3/site-packages"
    python3 -m pip install --quiet --disable-pip-version-check --target "$venv/lib/python3/site-packages" "${pkgs[@]}" >&2
  fi
  touch "$venv/.complete"
fi
cu13="$(site)/nvidia/cu13"
[[ -e "$cu13/lib/libnvrtc.so.13" && -e "$cu13/include/cuda_fp16.h" ]] || { log "error: $cu13 lacks NVRTC or its headers"; exit 1; }
# libnvrtc.so.13 has no RUNPATH: its builtins library is found through LD_LIBRARY_PATH.
printf 'export LD_LIBRARY_PATH=%q\n' "$cu13/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
printf 'export KILN_CUDA_INCLUDE=%q\n' "$cu13/include"
printf 'export KILN_REQUIRE_NVRTC=1\n'
