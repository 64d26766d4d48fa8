#!/usr/bin/env bash
# Two stages alone on one H200, in one device call (<= 9 minutes): Kokoro with its decoder replayed from CUDA
# graphs, and the transcription server at its defaults (issue 19).
#
#  0. tests/gpu/test_kokoro_cuda.py: graphs == eager per item (fp32, bf16, bf16 compiled; the acoustic side and
#     the text side), the engine with graphs streams -> pytest_kokoro.log;
#  1. bench/tts_gpu.py --cuda-graphs (bf16, eager kernels): time to first audio at one stream, the batch table
#     (eager fp32 / bf16, bf16 replayed from the acoustic graphs, and from the acoustic + text graphs, side by
#     side) and the streaming ramp, to set beside run 17's eager ramp (128 streams
#     >= 1.2x, 256 FAIL) -> tts_gpu_graphs.json, tts.log; TTS_COMPILE=1 adds the compiled rows and compiles;
#  2. bench/transcribe_server.py --device cuda: `cadence transcribe-server`'s defaults (host worker processes
#     feeding one engine), plan 10:1,256; mix:256; 3600:4, next to the engine's own RTFx in the same run
#     -> transcribe_server_parakeet_cuda.json, server.log.
# Prepare here: bench/wheels_cascade.sh; the call carries [".whl", ".cascade"] and runs this file.
# Knobs: STEPS (default "tts server"), TTS_LEVELS, SERVER_PLAN.
set -u -o pipefail
OUT=${OUT:-/tmp/stages-out}
STEPS=${STEPS:-pytest tts server}
# shellcheck source=bench/device_preamble.sh
source bench/device_preamble.sh
# can processes share the GPU without time-slicing (CUDA MPS)? The cascade runs three CUDA processes.
say "MPS: $(command -v nvidia-cuda-mps-control || echo 'nvidia-cuda-mps-control absent'); compute mode $(nvidia-smi --query-gpu=compute_mode --format=csv,noheader)"

if [[ " $STEPS " == *" pytest "* ]]; then
  timeout 220 python3 -m pytest -q -s -rs -p no:cacheprovider tests/gpu/test_kokoro_cuda.py > "$OUT/pytest_kokoro.log" 2>&1
  say "pytest rc=$?: $(tail -1 "$OUT/pytest_kokoro.log")"
  grep -E "graphs vs eager|kokoro graphs|FAILED|Error" "$OUT/pytest_kokoro.log" | cut -c1-400 | tee -a "$OUT/summary.txt"
fi
if [[ " $STEPS " == *" tts "* ]]; then
  COMPILE=(--no-compile --batch-compiled-dtypes "")
  [ "${TTS_COMPILE:-0}" = 1 ] && COMPILE=(--compile --batch-compiled-dtypes bfloat16)
  timeout 240 python3 bench/tts_gpu.py --cuda-graphs "${COMPILE[@]}" --single-n 30 --batch-sizes 1,4,8,32,64 \
    --profile-batch 0 --levels "${TTS_LEVELS:-128,256,384}" --level-s 15 --stop-after-fails 1 \
    --out "$OUT/tts_gpu_graphs.json" > "$OUT/tts.log" 2>&1
  say "tts rc=$?"
  grep -E "engine on|CUDA graphs|first_audio_ms|batch |streams:|max streams|Error" "$OUT/tts.log" | cut -c1-300 \
    | tee -a "$OUT/summary.txt"
fi
if [[ " $STEPS " == *" server "* ]]; then
  timeout 330 python3 bench/transcribe_server.py --device cuda ${SERVER_PLAN:+--plan "$SERVER_PLAN"} \
    --out "$OUT" > "$OUT/server.log" 2>&1
  say "server rc=$?"
  grep -E "fast backend|replay ms" "$OUT/server.log" | tee -a "$OUT/summary.txt"
  tail -25 "$OUT/server.log" | tee -a "$OUT/summary.txt"
fi
say "$(compile_cache_back "$OUT")"
say "done"
