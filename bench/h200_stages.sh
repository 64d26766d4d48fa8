#!/usr/bin/env bash
# One H200 call: each GPU stage alone at the current commit, every log and JSON in $OUT.
#   Kokoro CUDA tests, bench/tts_gpu.py (first audio at 1 stream, batch table, real-time stream ramp),
#   bench/streaming_batcher.py at the agent's defaults (10 s left context, 160 ms chunks, 640 ms
#   partials), two passes (cold, warm), the claim being the worse.
# Carry .whl (espeakng-loader: real phonemes on the device image, which has no espeak-ng).
#   CADENCE_COMMIT=$(git rev-parse --short HEAD) OUT=/some/dir bash bench/h200_stages.sh
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-bench/results/stages}; mkdir -p "$OUT"
if ls .whl/espeakng_loader-*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/espeakng_loader-*.whl
  export PYTHONPATH=/tmp/site; G2P=espeak
else G2P=none; fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
export TORCHINDUCTOR_CACHE_DIR=${TORCHINDUCTOR_CACHE_DIR:-/tmp/cadence-inductor}
STEPS=${STEPS:-kokoro_tests tts stream}
TTS_LEVELS=${TTS_LEVELS:-1,16,64,128,256,384,512}
CALLERS=${CALLERS:-512,768,896}
status=0
step() {  # step NAME SECONDS CMD...
  local name=$1 limit=$2; shift 2
  [[ " $STEPS " == *" $name "* ]] || return 0
  local t0; t0=$(date +%s)
  timeout "$limit" "$@" >"$OUT/$name.log" 2>&1; local rc=$?
  echo "== $name: rc $rc, $(( $(date +%s) - t0 )) s"; [ $rc -eq 0 ] || status=1
}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
step kokoro_tests 80 python3 -m pytest -q -p no:cacheprovider -s tests/gpu/test_kokoro_cuda.py
[ -f "$OUT/kokoro_tests.log" ] && tail -n 4 "$OUT/kokoro_tests.log"
step tts ${TTS_S:-220} python3 bench/tts_gpu.py --g2p "$G2P" --levels "$TTS_LEVELS" --level-s 15 --out "$OUT/tts_gpu.json"
[ -f "$OUT/tts.log" ] && tail -n 22 "$OUT/tts.log"
step stream ${STREAM_S:-270} python3 bench/streaming_batcher.py --callers "$CALLERS" --passes 2 --duration 12 --out "$OUT"
[ -f "$OUT/stream.log" ] && tail -n 25 "$OUT/stream.log"
exit $status
