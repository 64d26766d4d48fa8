#!/usr/bin/env bash
# Issue 6 on one H200: POST /v1/audio/transcriptions on Parakeet's fast backend (profiled, graphed
# encoder + graph decoder; 0.6B v3 architecture, random weights biased to emit like speech).
# 10 s clips at concurrency 1/16/64, 5 min at 1/16/32/64, 1 h at 1/4; two encoder profiles
# (batch 64 x ~10 s and x ~30 s) to keep the torch.compile + capture time to ~25 s. ~2.5 min in all.
#
#   OUT=/some/dir bash bench/gpu_issue6.sh          # writes $OUT/transcribe_server_parakeet_h200_fast.json
#   DEVICE=cpu SMALL=1 bash bench/gpu_issue6.sh     # toy scale on a CPU (tiny random checkpoint)
#
# Needs numpy, torch, transformers, aiohttp, soundfile; not pipecat. BUDGET_S caps the run (partial
# results are saved after every level).
set -euo pipefail
cd "$(dirname "$0")/.."
DEVICE=${DEVICE:-cuda}
OUT=${OUT:-bench/results}
PY=${PYTHON:-python3}
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
NAME=transcribe_server_parakeet_h200_fast

if [[ ${SMALL:-0} == 1 ]]; then
  NAME=transcribe_server_parakeet_small_fast
  MODEL=$(mktemp -d)/tiny
  $PY -c "import sys; from asr.parakeet.tiny import make_tiny_checkpoint; make_tiny_checkpoint(sys.argv[1])" "$MODEL" \
    >/dev/null 2>&1
  ARGS=(--model "$MODEL" --dtype float32 --max-batch 4 --profiles "w10=4x1024,w30=4x3008"
        --plan "10:1,4;45:1,2" --min-audio-s 0 --max-rounds 1)
else
  ARGS=(--model random-v3 --dtype bfloat16 --max-batch 64 --profiles "w10=64x1024,w30=64x3008"
        --plan "10:1,16,64;300:1,16,32,64;3600:1,4" --min-audio-s 40 --max-rounds 2 --price 3.50)
fi

start=$(date +%s)
timeout "${BUDGET_S:-280}" "$PY" bench/transcribe_server.py --engine parakeet --device "$DEVICE" \
  --parakeet-backend fast "${ARGS[@]}" --name "$NAME" --out "$OUT"
echo "gpu_issue6: $(( $(date +%s) - start )) s wall"

$PY - "$OUT/$NAME.json" <<'EOF'
import json, sys

data = json.load(open(sys.argv[1]))
print(f"\n{data['model']} on {data['device']} ({data.get('parakeet_backend')} backend, profiles {data.get('profiles')}),"
      f" server up in {data.get('server_startup_s')} s, {data.get('total_wall_s')} s in all")
print(f"{'clip s':>7} {'conc':>5} {'reqs':>5} {'audio s/s':>10} {'p50 s':>7} {'p90 s':>7} {'win/batch':>9} {'$/audio h':>10}")
for r in data["results"]:
    print(f"{r['clip_s']:7g} {r['concurrency']:5d} {r['requests']:5d} {r['audio_s_per_wall_s']:10.1f} "
          f"{r['latency_p50_s']:7.3f} {r['latency_p90_s']:7.3f} {r['windows_per_batch']:9.2f} {r['usd_per_audio_hour']:10.5f}")
for clip, s in data.get("summary", {}).items():
    print(f"{clip}: best {s['best_audio_s_per_wall_s']} audio s/s at x{s['at_concurrency']}, ${s['usd_per_audio_hour']}/audio h")
EOF
