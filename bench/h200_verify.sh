#!/usr/bin/env bash
# The H200 figures of the README at one commit: every tests/gpu test, the fast path against the
# fp32 reference on a model with trained-like margins (step "reference"), the streaming sweep
# through the real StreamBatcher (1 to 1024 callers), offline RTFx against transformers' generate
# (30 s clips at batch 1 and 128), the decoder modes (batch 1/16/128), the transcription server over
# HTTP (step "server") and Kokoro alone (step "tts"); the whole cascade is bench/h200_cascade.sh. Each step has its own time
# limit so one slow step cannot eat the others (all steps together exceed one 10-minute device call:
# run them as subsets, e.g. STEPS=reference), and every log lands in $OUT.
#
#   CADENCE_COMMIT=$(git rev-parse --short HEAD) OUT=/some/dir bash bench/h200_verify.sh
#
# Needs the device image's python3 (torch, transformers, triton, cuda-bindings, pytest); not pipecat. Carry .whl
# (bench/wheels_cascade.sh): the tests' conftest imports loguru.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-bench/results/verify}
PY=${PYTHON:-python3}
mkdir -p "$OUT"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
# tests/conftest.py imports loguru, which the device image lacks: carry .whl (bench/wheels_cascade.sh) and it is
# installed here (run 49 lost its reference step to that ImportError)
if compgen -G ".whl/*.whl" > /dev/null; then
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    > "$OUT/pip.log" 2>&1 && export PYTHONPATH="$PYTHONPATH:/tmp/site"
fi
export TORCHINDUCTOR_CACHE_DIR=${TORCHINDUCTOR_CACHE_DIR:-/tmp/cadence-inductor}  # shared by the steps
# shellcheck source=bench/compile_cache.sh
source bench/compile_cache.sh && compile_cache_on && compile_cache_status  # carried: earlier calls' compiles
CALLERS=${CALLERS:-1,64,256,512,576,640,704,768,1024}
STEPS=${STEPS:-pytest_gpu reference streaming offline decoder server tts}  # a subset re-runs only those
status=0

step() {  # step NAME SECONDS CMD...: run with a limit, log to $OUT/NAME.log, remember a failure
  local name=$1 limit=$2; shift 2
  [[ " $STEPS " == *" $name "* ]] || return 0
  local t0; t0=$(date +%s)
  timeout "$limit" "$@" >"$OUT/$name.log" 2>&1
  local rc=$?
  echo "== $name: rc $rc, $(( $(date +%s) - t0 )) s"
  [ $rc -eq 0 ] || status=1
}

nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
REFERENCE_TESTS="tests/gpu/test_fast_path_reference.py tests/gpu/test_fused_ties.py"
step pytest_gpu 280 "$PY" -m pytest -q -rs --durations=8 -p no:cacheprovider tests/gpu \
  --ignore=tests/gpu/test_fast_path_reference.py --ignore=tests/gpu/test_fused_ties.py
[ -f "$OUT/pytest_gpu.log" ] && tail -n 14 "$OUT/pytest_gpu.log"
# bf16 compiled + graphed + fused + two-stream vs the fp32 plain loop (tiny and v3-sized), and the fused
# steps replayed from the torch steps' own state (why they part at batch 128); -s prints the JSON verdicts
step reference 480 "$PY" -m pytest -q -s -rs -m gpu --durations=6 -p no:cacheprovider $REFERENCE_TESTS
[ -f "$OUT/reference.log" ] && grep -E '\{"|passed|failed|Error' "$OUT/reference.log" | cut -c1-600
# 13 derived encoder profiles compile first: 60-200 s by loan (run 49: 197 s, and the 250 s limit cut the sweep)
step streaming 360 "$PY" bench/streaming_batcher.py --device cuda --callers "$CALLERS" --stop-ms 200 --out "$OUT"
[ -f "$OUT/streaming.log" ] && grep -A 14 "^callers |" "$OUT/streaming.log"
step offline 130 "$PY" bench/offline_rtfx.py --configs "30:1,128" --out "$OUT"
[ -f "$OUT/offline.log" ] && grep -A 3 "config   ours" "$OUT/offline.log"
step decoder 75 "$PY" bench/decoder_bench.py --batches 1,16,128 --out "$OUT"
[ -f "$OUT/decoder.log" ] && tail -n 5 "$OUT/decoder.log"
# the two served stages alone, as bench/h200_tts_server.sh runs them (needs the carried .whl): the transcription
# server at its defaults over HTTP next to the engine alone (plan 10:1,256; mix:256; 3600:4), and Kokoro alone
# (first audio at one stream, the batch table, the streaming ramp)
step server 360 env STEPS=server OUT="$OUT/server" bash bench/h200_tts_server.sh
[ -f "$OUT/server/summary.txt" ] && grep -E "audio s/s|single|CPU|rc=" "$OUT/server/summary.txt" | head -12
step tts 270 env STEPS=tts OUT="$OUT/tts" bash bench/h200_tts_server.sh
[ -f "$OUT/tts/summary.txt" ] && grep -vE "^\[[0-9]+ s\] (commit|MPS|done)" "$OUT/tts/summary.txt" | head -30
compile_cache_back "$OUT"
exit $status
