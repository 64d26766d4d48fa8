#!/usr/bin/env bash
# Kokoro alone, arms side by side in one device call: bench/tts_gpu.py (bf16, decoder and text CUDA graphs) once per
# arm, in the order given, each with the same single-stream, batch-table and streaming-ramp steps, so the arms'
# first audio, batch times and the largest level at reply ratio p1 >= 1.2x read against each other on one card.
#
#   CADENCE_COMMIT=<hash> bash bench/tts_plan_ab.sh          # carries [".whl", ".cascade"]
#
# Knobs: ARMS ("|"-separated tts_gpu.py flags; default: the replay plans "fewest" (before run 66) and "cost",
# and "cost" with cuDNN's per-shape algorithm search), LEVELS (default 192,256), LEVEL_S (12), SKIP (tts_gpu.py
# phases to skip, e.g. "batches"), HANG_S (a phase or level this long: every thread's stack printed, the arm ends),
# KOKORO_TEST=1 runs tests/gpu/test_kokoro_cuda.py's plan and graph tests first (-k "$PYTEST_K", default "cost_plan").
# $OUT gets summary.txt (each arm's lines), arms.tar.gz (per arm: tts.json, tts.log, the curve) and pytest.log.
set -u -o pipefail
OUT=${OUT:-/tmp/tts-plan-out}
# shellcheck source=bench/device_preamble.sh
source bench/device_preamble.sh
ARMS=${ARMS:-"--graph-plan fewest|--graph-plan cost|--graph-plan cost --cudnn-benchmark"}
if [ "${KOKORO_TEST:-0}" = 1 ]; then
  timeout 200 python3 -m pytest -q -s -rs -p no:cacheprovider tests/gpu/test_kokoro_cuda.py \
    -k "${PYTEST_K:-cost_plan}" > "$OUT/pytest.log" 2>&1
  say "pytest rc=$?: $(tail -1 "$OUT/pytest.log")"
  grep -E "cost plan|graphs vs eager|first clause|FAILED|Error|Timeout|Thread|File" "$OUT/pytest.log" | cut -c1-300 | tee -a "$OUT/summary.txt"
fi
IFS='|' read -r -a arms <<< "$ARMS"
i=0
for arm in "${arms[@]}"; do
  i=$((i + 1))
  dir="$OUT/arms/arm$i"
  mkdir -p "$dir"
  say "arm $i: $arm"
  # shellcheck disable=SC2086  # the arm's flags split on spaces
  timeout 200 python3 bench/tts_gpu.py --cuda-graphs --no-compile --batch-compiled-dtypes "" --batch-dtypes "" \
    --single-n 30 --batch-sizes 1,8,20,33,48,64 --profile-batch 0 --levels "${LEVELS:-192,256}" \
    --level-s "${LEVEL_S:-12}" --stop-after-fails 2 --hang-s "${HANG_S:-0}" ${SKIP:+--skip "$SKIP"} $arm \
    --out "$dir/tts.json" > "$dir/tts.log" 2>&1
  say "arm $i rc=$?"
  grep -E "replays timed|engine on|first_audio_ms|graphs(\+text)? +B=|streams:|after the ramp|Thread|File|Timeout" \
    "$dir/tts.log" \
    | cut -c1-400 | tee -a "$OUT/summary.txt"
done
tar -czf "$OUT/arms.tar.gz" -C "$OUT" arms && rm -rf "$OUT/arms"
say "$(compile_cache_back "$OUT")"
rm -f "$OUT/compile_cache.tar"
say "done; files: $(cd "$OUT" && ls | tr '\n' ' ')"
