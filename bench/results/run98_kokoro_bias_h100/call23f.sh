#!/usr/bin/env bash
# Device call 6 (twenty-third session): fc5b3ac's bias-free resblock convolutions on the GPU.
# 1. tests/gpu/test_kokoro_cuda.py whole (the corrected compiled test; compiled and graphs against eager);
# 2. bench/kokoro_profile.py --compile --graphs --layouts at batch 32 (the call against run 93's, and the layouts);
# 3. Kokoro alone compiled (bench/tts_plan_ab.sh, one arm) at 512 and 640 streams, if time is left.
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1); echo "GPU: $GPU"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  > /dev/null 2>&1
export PYTHONPATH=$PWD:/tmp/site PYTHONUNBUFFERED=1 TORCHINDUCTOR_CACHE_DIR=/tmp/cadence-inductor
timeout 230 python3 -m pytest -q -s -rs -p no:cacheprovider tests/gpu/test_kokoro_cuda.py > "$OUT/pytest_kokoro.log" 2>&1
echo "[$(el) s] pytest rc=$?: $(tail -1 "$OUT/pytest_kokoro.log")"
grep -E "FAILED|Error|relative L2|graphs vs eager" "$OUT/pytest_kokoro.log" | cut -c1-400 | head -20
timeout 150 python3 bench/kokoro_profile.py --batch 32 --compile --graphs --layouts --out "$OUT/kokoro_profile_b32.json" \
  > "$OUT/kokoro_profile_b32.log" 2>&1
echo "[$(el) s] profile rc=$?"
grep -v -E "USDT|UserWarning|_warn_once|warnings.warn" "$OUT/kokoro_profile_b32.log" | grep -v "^  conv" | head -50
left=$((${CALL_S:-500} - $(el)))
if [ "$left" -gt 130 ]; then
  CADENCE_COMMIT=$C LEVELS=512,640 SKIP=batches ARMS="--graph-plan cost --compile" OUT=$OUT/tts bash bench/tts_plan_ab.sh \
    > "$OUT/tts_plan.log" 2>&1
  echo "[$(el) s] tts arm done"; grep -E "streams:|first_audio_ms|engine on" "$OUT/tts/summary.txt" | cut -c1-300
  rm -f "$OUT/tts/compile_cache.tar"
else
  echo "tts arm skipped: ${left} s left"
fi
ls -la "$OUT" "$OUT/tts" 2>/dev/null
