#!/usr/bin/env bash
# The transcription server's encoder profiles A/B on one H200, in one device call (issue 19): the server's
# defaults and each candidate set run the same plan (10 s clips alone and at 256, the length mix at 256, 1 h files
# four at once) through HTTP, each next to the engine's own RTFx, one after another on the same loan.
#
#   SETS="default|w4=64x384,...|..." MAX_BATCHES="0|0|128" bash bench/h200_server_profiles.sh
#
# SETS: profile sets separated by "|" ("default": the server's own); MAX_BATCHES: the --max-batch of each set
# (0: the engine's default). Each set writes transcribe_server_setN.json and server-setN.log under $OUT.
# Prepare here: bench/wheels_cascade.sh; the call carries [".whl", ".cascade"] and runs this file.
set -u -o pipefail
OUT=${OUT:-/tmp/profiles-out}
# shellcheck source=bench/device_preamble.sh
source bench/device_preamble.sh
IFS='|' read -r -a sets <<< "${SETS:-default}"
IFS='|' read -r -a batches <<< "${MAX_BATCHES:-0}"
for i in "${!sets[@]}"; do
  set_="${sets[$i]}"
  mb="${batches[$i]:-0}"
  profiles=()
  [ "$set_" != default ] && profiles=(--profiles "$set_")
  say "set$i: profiles ${set_}, max batch ${mb}"
  timeout "${SET_TIMEOUT_S:-170}" python3 bench/transcribe_server.py --device cuda "${profiles[@]}" --max-batch "$mb" \
    ${SERVER_PLAN:+--plan "$SERVER_PLAN"} --name "transcribe_server_set$i" --out "$OUT" > "$OUT/server-set$i.log" 2>&1
  say "set$i rc=$?"
  grep -E "server ready|fast backend|replay ms" "$OUT/server-set$i.log" | tee -a "$OUT/summary.txt"
  python3 - "$OUT/transcribe_server_set$i.json" <<'PY' 2>&1 | tee -a "$OUT/summary.txt"
import json, sys
d = json.load(open(sys.argv[1]))
for clips, s in d["summary"].items():
    print(f"  {clips:>5}: {s['best_audio_s_per_wall_s']:>8.0f} audio s/s at {s['at_concurrency']}, engine alone "
          f"{s['engine_alone_rtfx']:.0f} ({s['http_vs_engine']:.2f}), p50 {s['latency_p50_s_at_best'] * 1000:.0f} ms"
          + (f", single p50 {s['single_request_latency_p50_s'] * 1000:.0f} ms" if "single_request_latency_p50_s" in s else ""))
PY
done
say "done"
