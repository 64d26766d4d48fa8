#!/usr/bin/env bash
# Wheels the H200 image lacks for the Kokoro GPU TTS work (run here, in the repo root; the device
# cannot reach a registry). The engine itself needs only torch and numpy, which the image has:
# Cadence implements Kokoro's architecture (no `kokoro`/`misaki` packages, whose misaki[en] pulls
# spaCy and downloads a model at run time). The one optional wheel is espeakng-loader, which
# carries libespeak-ng 1.52 and its data, so `bench/tts_gpu.py --g2p espeak` phonemizes real text
# on the device (the image has no espeak-ng; without it use `--g2p none`). pytest is on the image.
#
#   bash bench/wheels_gputts.sh
#   device run, carry [".whl"]:
#     python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
#       .whl/*.whl && export PYTHONPATH=/tmp/site:. || exit; ...
set -euo pipefail
cd "$(dirname "$0")/.."
exclude=$(git rev-parse --git-path info/exclude)
grep -qx '/.whl/' .gitignore || grep -qx '/.whl/' "$exclude" 2>/dev/null || echo /.whl/ >> "$exclude"
PIP="${PIP:-python3 -m pip}"
$PIP download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 --platform manylinux1_x86_64 -d .whl espeakng-loader==0.2.4
ls -l .whl
