#!/usr/bin/env bash
# The session process's CPU per speaking phone call on the CPU box: examples/gpu.toml's flow (phone line ->
# batched Silero + smart-turn in the engine process -> streaming Parakeet in an engine process -> transformers
# serve -> the TTS in an engine process), with toy models on the CPU (a tiny Parakeet and a tiny LLM of the real
# architectures, Piper for the TTS), one session process, N synthetic callers of `cadence capacity --transport phone`
# speaking the recorded prompts. What the H200 runs' session workers spend per call, without a GPU: the engines'
# and the LLM's CPU are reported apart (`server CPU cores workers ..., engines ..., llm ...` in the level's line).
#
#   bash bench/cascade_cpu_box.sh NAME CALLERS [SECTION.KEY=VALUE ...]
#   bash bench/cascade_cpu_box.sh levers 8 audio.forward_input_past_turn=false phone.input_frame_ms=40
#
# -> /tmp/cascade-cpu/NAME/{serve.log,cap.log,capacity.json,records-N.json.gz (every caller's timeline)}; SPY=1 also records 20 s of py-spy on the session
# process (spy.txt, raw; needs `pip install py-spy` in the venv). HOLD (default 40) and WARMUP (8) are the level's seconds. Needs accelerate in the
# venv (transformers serve's device map: `pip install -e ".[llm-transformers]"`) and .cascade/ from bench/wheels_cascade.sh (the prompts, smart-turn).
# ROOT runs another checkout of the repo (an A/B against an earlier commit's worktree); LINGER_S keeps the server up
# that long after the callers hang up (bench/session_gc_heap.sh times a full collection in the idle processes).
set -u -o pipefail
cd "${ROOT:-$(dirname "$0")/..}"
NAME=${1:?NAME}; N=${2:?CALLERS}; shift 2
PY=${PY:-.venv/bin/python}
OUTD=/tmp/cascade-cpu/$NAME; rm -rf "$OUTD"; mkdir -p "$OUTD" /tmp/cadence
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
[ -f /tmp/cadence/parakeet-v3/config.json ] || "$PY" bench/parakeet_checkpoint.py /tmp/cadence/parakeet-v3 --tiny > "$OUTD/ckpt.log" 2>&1
[ -f /tmp/cadence/llm/config.json ] || "$PY" bench/llm_checkpoint.py /tmp/cadence/llm --tiny >> "$OUTD/ckpt.log" 2>&1
SETS=(--set asr.device=cpu --set asr.dtype=float32 --set asr.encoder_backend=eager --set tts.engine=piper
      --set gpu.asr_fraction=0 --set gpu.llm_fraction=0 --set gpu.tts_fraction=0
      --set "llm.server_args=--device cpu --cb-num-blocks 256"
      --set vad.turn_model=engine --set vad.turn_device=cpu --set vad.turn_weights=.cascade/smart_turn_v3.npz
      --set "admission.max_sessions=$((2 * N))" --set admission.queue_size=0 --set admission.budget_gate=false
      --set llm.temperature=1.0 --set llm.max_tokens=24 --set budgets.window_s=900 --set gpu.check_measured=false
      --set server.engine_process=true)
for s in "$@"; do SETS+=(--set "$s"); done
PORT=${PORT:-7870}
"$PY" -m agent.cli serve --config examples/gpu.toml --port "$PORT" "${SETS[@]}" > "$OUTD/serve.log" 2>&1 &
SP=$!
trap 'kill -INT $SP 2>/dev/null; wait $SP 2>/dev/null' EXIT
for _ in $(seq 400); do grep -q "Cadence is ready" "$OUTD/serve.log" && break; kill -0 $SP || { tail -20 "$OUTD/serve.log"; exit 1; }; sleep 1; done
"$PY" -m agent.cli capacity --config examples/gpu.toml --transport phone --url "http://127.0.0.1:$PORT" \
  --prompts .cascade/prompts.npz --levels "$N" --warmup "${WARMUP:-8}" --hold "${HOLD:-40}" --max-wait 8 --all-levels \
  --no-refine --records --out-dir "$OUTD" --write-config "$OUTD/cap.toml" "${SETS[@]}" > "$OUTD/cap.log" 2>&1 &
CP=$!
if [ "${SPY:-0}" = 1 ]; then
  [ -x "$(dirname "$PY")/py-spy" ] || echo "SPY=1: no py-spy next to $PY (pip install py-spy): no profile" >&2
  sleep 20
  "$(dirname "$PY")/py-spy" record -r 100 -d 20 -p $SP -f raw -o "$OUTD/spy.txt" > /dev/null 2>&1
fi
wait $CP
sleep "${LINGER_S:-0}"
grep -E "phone callers" "$OUTD/cap.log" | cut -c1-1500
