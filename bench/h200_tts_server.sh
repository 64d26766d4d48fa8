#!/usr/bin/env bash
# Two stages alone on one H200, in one device call (<= 9 minutes): Kokoro compiled, and the transcription
# server at its defaults (issue 19).
#
#  1. bench/tts_gpu.py with the decoder's fused AdaIN/Snake steps compiled (KokoroOptions.compile): the batch
#     table (eager fp32 / bf16 and compiled bf16 side by side) and the streaming ramp compiled, to set beside
#     run 17's eager ramp (128 streams >= 1.2x, 256 FAIL) -> tts_gpu_compiled.json, tts.log;
#  2. bench/transcribe_server.py --device cuda: `cadence transcribe-server`'s defaults (host worker processes
#     feeding one engine), plan 10:1,256; mix:256; 3600:4, next to the engine's own RTFx in the same run
#     -> transcribe_server_parakeet_cuda.json, server.log.
# Prepare here: bench/wheels_cascade.sh; the call carries [".whl", ".cascade"] and runs this file.
# Knobs: STEPS (default "tts server"), TTS_LEVELS, SERVER_PLAN.
set -u -o pipefail
START=$(date +%s)
OUT=${OUT:-/tmp/stages-out}
mkdir -p "$OUT"
STEPS=${STEPS:-tts server}
say() { echo "[$(($(date +%s) - START)) s] $*" | tee -a "$OUT/summary.txt"; }
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
  .whl/*.whl > "$OUT/pip.log" 2>&1 || { say "pip install failed"; tail -20 "$OUT/pip.log"; exit 1; }
export PYTHONPATH="$PWD:/tmp/site${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1
export TORCHINDUCTOR_CACHE_DIR=/tmp/cadence-inductor
say "commit $(head -1 .cascade/COMMIT 2>/dev/null); $(nvidia-smi --query-gpu=name,memory.total --format=csv,noheader)"
# can processes share the GPU without time-slicing (CUDA MPS)? The cascade runs three CUDA processes.
say "MPS: $(command -v nvidia-cuda-mps-control || echo 'nvidia-cuda-mps-control absent'); compute mode $(nvidia-smi --query-gpu=compute_mode --format=csv,noheader)"

if [[ " $STEPS " == *" tts "* ]]; then
  timeout 250 python3 bench/tts_gpu.py --compile --skip single --batch-sizes 1,32,128 --profile-batch 0 \
    --levels "${TTS_LEVELS:-128,256}" --level-s 15 --stop-after-fails 1 \
    --out "$OUT/tts_gpu_compiled.json" > "$OUT/tts.log" 2>&1
  say "tts rc=$?"
  grep -E "engine on|batch |streams:|max streams" "$OUT/tts.log" | tee -a "$OUT/summary.txt"
fi
if [[ " $STEPS " == *" server "* ]]; then
  timeout 300 python3 bench/transcribe_server.py --device cuda ${SERVER_PLAN:+--plan "$SERVER_PLAN"} \
    --out "$OUT" > "$OUT/server.log" 2>&1
  say "server rc=$?"
  tail -25 "$OUT/server.log" | tee -a "$OUT/summary.txt"
fi
say "done"
