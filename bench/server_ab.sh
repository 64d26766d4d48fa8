#!/usr/bin/env bash
# Issue 19's server step (bench/h200_verify.sh STEPS=server: `cadence transcribe-server` at its defaults over HTTP,
# next to the engine alone) once per arm, one after another in one device call, on the same warm machine:
#
#   ARMS="default|CADENCE_BATCH_FILL=0|CADENCE_PIPELINE_BATCHES=0|default" CADENCE_COMMIT=<hash> bash bench/server_ab.sh
#
# ARMS: "|"-separated arms, each "K=V K=V" or "default" (the server's defaults). Only small files come back: per
# arm its JSON, the step's summary and the server log's tail, all in $OUT/server_ab.tgz with $OUT/summary.txt beside it. Run 88's
# first call lost three steps by packing each whole folder (the compile cache's 12 MB tar inside: over the size of
# what comes back, and a later call's $OUT starts empty). The first arm on a cold machine takes ~200 s, a warm one
# ~120 s; an arm is not started with less than STEP_S (default 130) left of BUDGET_S (default 570).
set -u -o pipefail
OUT=${OUT:-/tmp/server-ab}
BUDGET_S=${BUDGET_S:-570}
STEP_S=${STEP_S:-130}
START=$(date +%s)
mkdir -p "$OUT/arms"
say() { echo "[$(($(date +%s) - START)) s] $*" | tee -a "$OUT/summary.txt"; }
IFS='|' read -r -a arms <<< "${ARMS:?ARMS, e.g. 'default|CADENCE_PIPELINE_BATCHES=0|default'}"
for i in "${!arms[@]}"; do
  [ "${arms[$i]}" = default ] && arms[$i]=""
  left=$((START + BUDGET_S - $(date +%s)))
  [ "$left" -lt "$STEP_S" ] && { say "arm$i (${arms[$i]:-defaults}) not started: ${left} s left"; continue; }
  work=/tmp/server-ab-work/arm$i
  rm -rf "$work"
  # shellcheck disable=SC2086  (the arm's K=V words become the environment of its run)
  env ${arms[$i]} OUT="$work" STEPS=server bash bench/h200_verify.sh > /dev/null 2>&1
  keep="$OUT/arms/arm$i"
  mkdir -p "$keep"
  echo "${arms[$i]:-defaults}" > "$keep/arm.txt"
  cp "$work"/server/*.json "$keep/" 2>/dev/null
  cp "$work/server/summary.txt" "$keep/step_summary.txt" 2>/dev/null
  tail -n 300 "$work/server/server.log" > "$keep/server.log" 2>/dev/null
  say "arm$i (${arms[$i]:-defaults}):"
  grep -E "clips x|engine alone" "$keep/server.log" | tee -a "$OUT/summary.txt"
done
tar -czf "$OUT/server_ab.tgz" -C "$OUT" arms && rm -rf "$OUT/arms"
say "done: $(du -h "$OUT/server_ab.tgz" | cut -f1)"
