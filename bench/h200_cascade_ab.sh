#!/usr/bin/env bash
# Two arms of bench/h200_cascade.sh one after another in one device call, on the same loan and the same random
# models (the second arm reuses the first's): an A/B of one knob with everything else equal.
#
#   ARMS="TTS_ENGINES=2|TTS_ENGINES=1" LEVELS=64,128 WORKERS=8 MPS=1 bash bench/h200_cascade_ab.sh
#
# ARMS: the arms' extra environment, "|"-separated (each "K=V K=V"); the common knobs come from the environment.
# Each arm's seven files go into $OUT/armN.tar.gz; the arms' summaries into $OUT/summary.txt. ARM_BUDGET_S: each
# arm's BUDGET_S (default 300: a warm arm was ready after 115-152 s in runs 72-73 and 91-92, and three levels take
# ~125 s; h200_cascade.sh refuses a warm arm's budget below 250 s);
# FIRST_ARM_BUDGET_S: the first arm's (default ARM_BUDGET_S + 150): on a fresh machine it compiles the engines'
# kernels (ready after 122-154 s in runs 58-60, 151 s in run 73). Two arms then fill a 600 s call: pass both.
# REUSE_FIRST=1: the first arm too keeps the models an earlier call on this warm machine wrote (REUSE_MODELS=1), so
# its budget can be a warm arm's (runs 84-86: three warm arms at one level in one 456 s call).
set -u -o pipefail
OUT=${OUT:-/tmp/cascade-ab}
mkdir -p "$OUT"
IFS='|' read -r -a arms <<< "${ARMS:?ARMS, e.g. TTS_ENGINES=2|TTS_ENGINES=1}"
for i in "${!arms[@]}"; do
  rm -rf /tmp/cascade-logs "$OUT/arm$i"
  echo "=== arm$i: ${arms[$i]}" | tee -a "$OUT/summary.txt"
  reuse=${REUSE_FIRST:-0}; [ "$i" -gt 0 ] && reuse=1
  budget=${ARM_BUDGET_S:-300}
  [ "$i" -eq 0 ] && budget=${FIRST_ARM_BUDGET_S:-$((budget + 150))}
  # shellcheck disable=SC2086  (the arm's K=V words become the environment of its run)
  env ${arms[$i]} OUT="$OUT/arm$i" REUSE_MODELS=$reuse BUDGET_S="$budget" bash bench/h200_cascade.sh \
    > "$OUT/arm$i.log" 2>&1
  grep -E "phone callers|GPU memory after|engine process ready|cadence serve|FAIL|error|^kokoro " "$OUT/arm$i/summary.txt" \
    | cut -c1-600 | tee -a "$OUT/summary.txt"
  mv "$OUT/arm$i.log" "$OUT/arm$i/run.log"
  tar -czf "$OUT/arm$i.tar.gz" -C "$OUT" "arm$i" && rm -rf "$OUT/arm$i"
done
