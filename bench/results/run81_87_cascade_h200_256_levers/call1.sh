#!/usr/bin/env bash
# Device call 1 (twenty-first session): on an H200, issue 19's server step then the quiet arm cold;
# on an H100, the quiet arm cold then the quiet arm with the slower partial cadence, warm.
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1); echo "GPU: $GPU"
C=${C:?commit}
LEVERS=audio.forward_input_past_turn=false,phone.input_frame_ms=40,phone.output_frame_ms=40
export CADENCE_COMMIT=$C TURN_MODEL=engine MPS=1 WORKERS=12 LLM_LEVELS= STT_TEST=0
if [[ "$GPU" == *H200* ]]; then
  OUT=$OUT/verify STEPS=server bash bench/h200_verify.sh
  (cd "$OUT" && tar -czf verify.tgz verify && rm -rf verify)
  B=$((585 - $(el))); echo "[$(el) s] cascade arm budget $B"
  [ "$B" -ge 260 ] && LEVELS=64,256 FIRST_ARM_BUDGET_S=$B \
    ARMS="SERVE_SETS=$LEVERS,llm.speculate=final+quiet" bash bench/h200_cascade_ab.sh
else
  LEVELS=64,256 FIRST_ARM_BUDGET_S=330 ARM_BUDGET_S=240 \
    ARMS="SERVE_SETS=$LEVERS,llm.speculate=final+quiet|SERVE_SETS=$LEVERS,llm.speculate=final+quiet,asr.partial_interval_ms=1920" \
    bash bench/h200_cascade_ab.sh
fi
echo "[$(el) s] done"; ls -la "$OUT"
