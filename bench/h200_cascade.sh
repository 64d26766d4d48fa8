#!/usr/bin/env bash
# The whole cascade on one H200, measured as one system, in one device call (<= 9 minutes, 16 cores).
# Prepare here once: bench/wheels_cascade.sh (fills .whl/ and .cascade/); the device call carries
# [".whl", ".cascade"] and runs `bash bench/h200_cascade.sh`.
#
#  1. installs the carried wheels into /tmp/site (pipecat 1.14, fastapi/uvicorn/pydantic/openai, ...);
#  2. writes a random-weight LLM of a real instruct shape (SHAPE, default llama-3.2-1b) and a random
#     v3-sized Parakeet checkpoint (in parallel, on the GPU), while tests/gpu/test_parakeet_stt_cuda.py
#     runs Parakeet's pipecat STT service on CUDA as gpu.toml builds it (two callers, one batcher);
#  3. the LLM alone: `transformers serve --continuous-batching` started exactly as Cadence starts it
#     (pinned to gpu.device, KV cache sized to gpu.llm_fraction), time to first token p50/p99 at
#     LLM_LEVELS concurrent chats with replies capped at 48 tokens -> llm_alone.json;
#  4. `cadence serve --config examples/gpu.toml` (phone line -> Silero VAD + smart-turn -> streaming
#     Parakeet on CUDA -> the transformers-served LLM -> Kokoro on CUDA), stopped with its LLM server
#     at exit;
#  5. `cadence capacity --transport phone`: synthetic phone callers over /phone/ws on loopback, real
#     recorded prompts, 20 ms mu-law both ways in real time, every level of LEVELS -> capacity.json
#     (written after every level), capacity.png, cadence-capacity.toml.
# $OUT gets capacity.json, capacity.png, cadence-capacity.toml, llm_alone.json, records.tar (each level's caller
# timelines, records-N.json.gz: cadence capacity --records),
# summary.txt, logs.tar.gz (every log), nvidia-smi.csv and compile_cache.tar (bench/compile_cache.sh: carry
# ".compile_cache" in the next call to skip the compiles this one did).
# Knobs (environment): LEVELS WARMUP HOLD MAX_WAIT CONNECT_S PAUSE_JITTER LLM_LEVELS SHAPE REPLY_TOKENS TTS_ENGINE BUDGET_S WORKERS
# ENGINE_PROCESS ASR_ENGINE_PROCESS TTS_ENGINES KOKORO_COMPILE KOKORO_DTYPE CALIBRATE MPS STT_TEST KOKORO_TEST LLM_REPLICAS
# LLM_SERVER LLAMA_ARGS.
# LLM_SERVER=llama-server serves the LLM with llama.cpp's native server built with CUDA on the device
# (bench/llama_server_build.sh into /tmp/llama-build, ~270 s on 16 cores, alongside the checkpoints; carry
# ".llamacpp" from bench/llama_server_src.sh; or, once a build call returned the binary
# (`BUILD_DIR=/tmp/llama-build PACK_TO=$OUT bash bench/llama_server_build.sh`, parts copied into
# .llamacpp/bin/), carry ".llamacpp/bin" and ".llamacpp/gguf-kit.tar.gz" and skip the build) and a random
# f16 GGUF of the same shape
# (bench/llm_gguf_checkpoint.py); LLAMA_ARGS go to its command line (e.g. "--backend-sampling").
# LLM_REPLICAS=N sets llm.replicas: N transformers servers on 1/N of the LLM's share each, calls spread over
# them (agent/llm_replicas.py); their logs are llm-server-<i>.log.
# TTS_ENGINES=N sets server.tts_engines: Kokoro in N engine processes (engine.log, engine-tts2.log, ...), each
# clause stream sent to the one its session process has the fewest streams open on; with N > 1 gpu.tts_fraction
# becomes TTS_FRACTION (default 0.20), split N ways.
# REUSE_MODELS=1 keeps the LLM and Parakeet folders an earlier run of this call wrote in /tmp/cadence.
# ASR_ENGINE_PROCESS=0 keeps streaming Parakeet in the TTS's engine process (runs 25-30; gpu.toml now gives it
# one of its own, engine-asr.log).
# KOKORO_COMPILE=0 sets tts.kokoro_compile = false (gpu.toml compiles the decoder's fused AdaIN/Snake steps since
# runs 95-97); KOKORO_COMPILE=1 sets it true;
# KOKORO_DTYPE sets tts.kokoro_dtype (gpu.toml: bfloat16). KOKORO_GRAPHS=0 turns gpu.toml's
# tts.kokoro_cuda_graphs off (the eager decoder of runs 17-25).
# MPS=1 starts the CUDA MPS control daemon first (kernels of the LLM server and the engine process then run
# side by side instead of time-sliced), checks a CUDA context opens through it (else stops it and goes on
# without), and quits it at exit.
# Every 5 s top's busiest processes go to top.log (which process is CPU-bound: a session worker, the engine,
# the LLM server); with ENGINE_PROCESS=1 the engine logs its CPU share, loop lag and batchers' load (engine.log).
# ENGINE_PROCESS (default 1, gpu.toml's server.engine_process = true): one engine process (started by the parent, before any
# worker) owns Kokoro and streaming Parakeet (and their batchers) for every session process; its log is
# engine.log in logs.tar.gz. With WORKERS > 1 the shares are then one Kokoro's and one Parakeet's
# (gpu.tts_fraction 0.15, gpu.asr_fraction 0.15, as in one process). ENGINE_PROCESS=0: each session process
# loads its own (runs 17-22).
# WORKERS=N (default 1: one process, as before) runs `cadence serve --workers N`: one LLM server, N worker
# processes on port 7860 (SO_REUSEPORT); with ENGINE_PROCESS=0 each has its own Parakeet and Kokoro and the GPU
# shares are set for N copies (asr 0.22 + tts 0.36 split N ways, llm 0.30); the admission cap is 2 x the largest level (the kernel
# hashes connections to workers, it does not balance them, so a per-worker cap of exactly its part would
# refuse callers), and capacity reads the parent's summed /metrics on port 7861.
# DRY_RUN=1 runs the same steps on a CPU box (no wheels, toy models, Parakeet and transformers serve on the
# CPU, Piper for the TTS, PY= the python with Cadence installed): it checks the script, not the figures.
set -u -o pipefail
START=$(date +%s)
BUDGET_S=${BUDGET_S:-520}
left() { echo $((START + BUDGET_S - $(date +%s))); }
OUT=${OUT:-/tmp/cascade-out}
LOGS=/tmp/cascade-logs
mkdir -p "$OUT" "$LOGS" /tmp/cadence
LEVELS=${LEVELS:-16,32,64,128,256,320}
WARMUP=${WARMUP:-8}  # with CONNECT_S (capacity --connect-over, default 0.6 x WARMUP): e.g. WARMUP=14 CONNECT_S=11
HOLD=${HOLD:-12}
MAX_WAIT=${MAX_WAIT:-8}
LLM_LEVELS=${LLM_LEVELS-1,8,32,64,128,256}
SHAPE=${SHAPE:-llama-3.2-1b}
REPLY_TOKENS=${REPLY_TOKENS:-24}  # the cascade's reply cap: ~8 s of speech, so a caller takes a turn every ~11 s
MAX_LEVEL=$(echo "$LEVELS" | tr ',' '\n' | sort -n | tail -1)
PORT=7860
WORKERS=${WORKERS:-1}
MPORT=$PORT  # where /metrics, /health and /ready are read: the parent's summing listener with WORKERS > 1
[ "$WORKERS" -gt 1 ] && MPORT=$((PORT + 1))
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
SERVE_PID=""
SMI_PID=""
PY=${PY:-python3}
DRY=()  # config overrides for DRY_RUN
TINY=()
if [ "${DRY_RUN:-0}" = 1 ]; then
  # transformers serve loads models with a device map, which needs accelerate (the H200 image has it; the dev
  # extra does not install it: no test needs it)
  "$PY" -c "import accelerate" 2>/dev/null || { echo "DRY_RUN needs accelerate: $PY -m pip install accelerate" >&2; exit 2; }
  DRY=(--set asr.device=cpu --set asr.dtype=float32 --set asr.encoder_backend=eager --set tts.engine=piper
       --set gpu.asr_fraction=0 --set gpu.llm_fraction=0 --set gpu.tts_fraction=0 --set vad.turn_device=cpu
       --set "llm.server_args=--device cpu --cb-num-blocks 256")
  TINY=(--tiny)
fi
say() { echo "[$(($(date +%s) - START)) s] $*" | tee -a "$OUT/summary.txt"; }
# The serve waits while more than 120 s are left (the levels' reserve), and a cold start becomes ready ~130-140 s in
# (checkpoints, the LLM server, Parakeet's profiles, Kokoro's graphs; 115-118 s with REUSE_MODELS=1 on a warm
# machine, runs 91-92, Kokoro's engine process alone ~70 s): a budget below that spends the device's time on a start
# that is stopped before any level (runs 79 and 90: 235 s with REUSE_MODELS=1 was not enough).
MIN_BUDGET_S=$(( ${REUSE_MODELS:-0} == 1 ? 250 : 270 ))
if [ "${DRY_RUN:-0}" != 1 ] && [ "$BUDGET_S" -lt "$MIN_BUDGET_S" ]; then
  say "BUDGET_S=$BUDGET_S is below $MIN_BUDGET_S s: the serve would be stopped before its first level; not started"
  exit 2
fi

finish() {
  if [ -n "$SERVE_PID" ] && kill -0 "$SERVE_PID" 2>/dev/null; then
    children=$(ps -o pid= --ppid "$SERVE_PID" 2>/dev/null)
    kill -TERM "$SERVE_PID" 2>/dev/null  # cadence stops its LLM server on SIGTERM
    for _ in $(seq 20); do kill -0 "$SERVE_PID" 2>/dev/null || break; sleep 1; done
    kill -KILL "$SERVE_PID" 2>/dev/null
    for c in $children; do kill -TERM -- "-$c" 2>/dev/null; kill -TERM "$c" 2>/dev/null; done
  fi
  [ -n "$SMI_PID" ] && kill "$SMI_PID" 2>/dev/null
  [ "${MPS_UP:-0}" = 1 ] && echo quit | nvidia-cuda-mps-control
  [ -n "${TOP_PID:-}" ] && pkill -P "$TOP_PID" 2>/dev/null
  [ -f "$LOGS/nvidia-smi.csv" ] && cp "$LOGS/nvidia-smi.csv" "$OUT/"
  # a call returns at most 8 files: the levels' caller timelines travel as one
  if ls "$OUT"/records-*.json.gz > /dev/null 2>&1; then
    tar -cf "$OUT/records.tar" -C "$OUT" $(cd "$OUT" && ls records-*.json.gz) && rm -f "$OUT"/records-*.json.gz
  fi
  tar -czf "$OUT/logs.tar.gz" -C /tmp cascade-logs 2>/dev/null
  type compile_cache_back > /dev/null 2>&1 && say "$(compile_cache_back "$OUT")"
  say "done; files: $(ls "$OUT" | tr '\n' ' ')"
}
trap finish EXIT

# 1. wheels ------------------------------------------------------------------------------------
if [ "${DRY_RUN:-0}" != 1 ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
    .whl/*.whl > "$LOGS/pip.log" 2>&1 || { say "pip install failed"; tail -20 "$LOGS/pip.log"; exit 1; }
fi
export PYTHONPATH="$PWD:/tmp/site${PYTHONPATH:+:$PYTHONPATH}"
# the tree travels without .git: CADENCE_COMMIT=<hash> in the call's command names it; else .cascade/COMMIT, which
# bench/wheels_cascade.sh wrote when it ran (stale after later commits: run 63 was labelled 07f99aa at 04951e1)
export CADENCE_COMMIT="${CADENCE_COMMIT:-$(head -1 .cascade/COMMIT 2>/dev/null || echo unknown)}"
say "commit $CADENCE_COMMIT; wheels installed"
# shellcheck source=bench/compile_cache.sh
source bench/compile_cache.sh && compile_cache_on && say "$(compile_cache_status)"
"$PY" - <<'P' 2>&1 | tee "$LOGS/env.txt" | tee -a "$OUT/summary.txt"
import importlib, torch, transformers
gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no GPU"
print("torch", torch.__version__, gpu, "transformers", transformers.__version__)
for m in ("pipecat", "fastapi", "uvicorn", "websockets", "pynvml", "tts.kokoro", "agent.serve",
          "agent.phone_routes"):
    try:
        importlib.import_module(m)
        print("  import ok:", m)
    except Exception as exc:
        print("  IMPORT FAILED:", m, repr(exc)[:300])
P
MPS_UP=0
if [ "${MPS:-0}" = 1 ] && command -v nvidia-cuda-mps-control >/dev/null; then
  export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps-pipe CUDA_MPS_LOG_DIRECTORY=$LOGS/mps
  mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
  nvidia-cuda-mps-control -d && MPS_UP=1
  if [ $MPS_UP = 1 ] && timeout 60 "$PY" -c "import torch; torch.ones(1, device='cuda').sum().item()"; then
    say "CUDA MPS daemon up: the CUDA processes share the GPU through it"
  else
    [ $MPS_UP = 1 ] && echo quit | nvidia-cuda-mps-control
    MPS_UP=0; unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
    say "CUDA MPS did not come up: going on without it"
  fi
fi
nvidia-smi --query-gpu=timestamp,memory.used,memory.total,utilization.gpu --format=csv -l 5 \
  > "$LOGS/nvidia-smi.csv" 2>/dev/null &
SMI_PID=$!
(top -b -c -d 5 -w 220 2>/dev/null | grep --line-buffered -E "^top -|python|transformers|cadence|llama-server" > "$LOGS/top.log") &
TOP_PID=$!

# 2. random-weight models (and, alongside, Parakeet's pipecat STT service on CUDA as gpu.toml builds it) --
if [ "${STT_TEST:-1}" = 1 ]; then  # STT_TEST=0 skips it (run 20 ran it at the same code)
  timeout 200 "$PY" -m pytest -q -p no:cacheprovider tests/gpu/test_parakeet_stt_cuda.py > "$LOGS/pytest_stt_cuda.log" 2>&1 &
else
  echo "skipped (STT_TEST=0)" > "$LOGS/pytest_stt_cuda.log"; true &
fi
STT_TEST=$!
# KOKORO_TEST=1: tests/gpu/test_kokoro_cuda.py (graphs == eager per item, the engine with graphs streams) beside it
if [ "${KOKORO_TEST:-0}" = 1 ]; then
  timeout 200 "$PY" -m pytest -q -rs -p no:cacheprovider tests/gpu/test_kokoro_cuda.py > "$LOGS/pytest_kokoro_cuda.log" 2>&1 &
else
  echo "skipped (KOKORO_TEST=0)" > "$LOGS/pytest_kokoro_cuda.log"; true &
fi
KOKORO_TEST_PID=$!
LLM_SERVER=${LLM_SERVER:-transformers}
if [ "${REUSE_MODELS:-0}" = 1 ] && [ "$LLM_SERVER" = transformers ] && [ -f /tmp/cadence/llm/config.json ] \
   && [ -f /tmp/cadence/parakeet-v3/config.json ]; then
  # an A/B in one call (bench/h200_cascade_ab.sh): the second arm runs the first arm's very models
  echo "reused /tmp/cadence/llm" > "$LOGS/llm_checkpoint.log"
  echo "reused /tmp/cadence/parakeet-v3" > "$LOGS/parakeet_checkpoint.log"
  true & LLM_BUILD=$!
  SKIP_PARAKEET=1
elif [ "$LLM_SERVER" = llama-server ]; then
  LSRC=${LLAMA_SRC:-/tmp/llama.cpp-src}
  [ -d "$LSRC/llama.cpp" ] || bench/llama_src_unpack.sh "$LSRC"
  BUILD_DIR=${LLAMA_BUILD:-/tmp/llama-build} SRC_DIR=$LSRC bash bench/llama_server_build.sh \
    > "$LOGS/llama_build.out" 2> "$LOGS/llama_build.log" &
  LLAMA_BUILD_PID=$!
  GGUF_SHAPE=$SHAPE; [ ${#TINY[@]} -gt 0 ] && GGUF_SHAPE=tiny
  PYTHONPATH="$PYTHONPATH:$LSRC/llama.cpp/gguf-py" timeout 300 "$PY" bench/llm_gguf_checkpoint.py /tmp/cadence/llm.gguf \
    --shape "$GGUF_SHAPE" --vocab "$LSRC/llama.cpp/models/ggml-vocab-llama-bpe.gguf" > "$LOGS/llm_checkpoint.log" 2>&1 &
  LLM_BUILD=$!
else
  timeout 200 "$PY" bench/llm_checkpoint.py /tmp/cadence/llm --shape "$SHAPE" "${TINY[@]}" > "$LOGS/llm_checkpoint.log" 2>&1 &
  LLM_BUILD=$!
fi
# the random Parakeet's emission calibrated on the prompts the callers play (CALIBRATE=0: on random clips, as
# runs 17-29; with it, many prompt segments decoded to nothing); a failed prompt calibration falls back
CAL=(); [ "${CALIBRATE:-1}" = 1 ] && CAL=(--calibrate-on .cascade/prompts.npz)
if [ "${SKIP_PARAKEET:-0}" = 1 ]; then
  PK_RC=0
else
  timeout 200 "$PY" bench/parakeet_checkpoint.py /tmp/cadence/parakeet-v3 "${TINY[@]}" "${CAL[@]}" > "$LOGS/parakeet_checkpoint.log" 2>&1
  PK_RC=$?
fi
if [ $PK_RC -ne 0 ] && [ ${#CAL[@]} -gt 0 ]; then
  say "parakeet checkpoint calibrated on the prompts failed (rc=$PK_RC): calibrating on random clips"
  mv "$LOGS/parakeet_checkpoint.log" "$LOGS/parakeet_checkpoint_prompts_failed.log"
  timeout 150 "$PY" bench/parakeet_checkpoint.py /tmp/cadence/parakeet-v3 "${TINY[@]}" > "$LOGS/parakeet_checkpoint.log" 2>&1
  PK_RC=$?
fi
wait $LLM_BUILD; LLM_RC=$?
say "llm checkpoint rc=$LLM_RC: $(tail -1 "$LOGS/llm_checkpoint.log" | cut -c1-200)"
say "parakeet checkpoint rc=$PK_RC: $(tail -1 "$LOGS/parakeet_checkpoint.log" | cut -c1-200) ... $(tail -1 "$LOGS/parakeet_checkpoint.log" \
  | grep -oE '"(tokens_per_frame|empty_rows|calibration_audio)": ("[^"]*"|[0-9.]+)' | tr '\n' ' ')"
wait $STT_TEST
say "Parakeet STT service on CUDA under pipecat (tests/gpu/test_parakeet_stt_cuda.py): $(tail -1 "$LOGS/pytest_stt_cuda.log")"
wait $KOKORO_TEST_PID
say "Kokoro on CUDA (tests/gpu/test_kokoro_cuda.py): $(tail -1 "$LOGS/pytest_kokoro_cuda.log")"
grep -E "^FAILED|Error" "$LOGS/pytest_kokoro_cuda.log" | cut -c1-300 | head -5 | tee -a "$OUT/summary.txt"
[ $LLM_RC -eq 0 ] && [ $PK_RC -eq 0 ] || { tail -30 "$LOGS/llm_checkpoint.log" "$LOGS/parakeet_checkpoint.log"; exit 1; }
LLM_SETS=()
if [ "$LLM_SERVER" = llama-server ]; then
  wait $LLAMA_BUILD_PID; LB_RC=$?
  say "llama-server build rc=$LB_RC: $(grep -E "built|prebuilt" "$LOGS/llama_build.log" | tr '\n' ' ')"
  [ $LB_RC -eq 0 ] || { tail -30 "$LOGS/llama_build.log"; exit 1; }
  LLM_SETS=(--set llm.server=llama-server --set llm.model=/tmp/cadence/llm.gguf
            --set "llm.server_path=$(tail -1 "$LOGS/llama_build.out")")
  LLM_SETS+=(--set "llm.server_args=${LLAMA_ARGS:-}")  # (DRY_RUN's are transformers serve's)
  [ "${DRY_RUN:-0}" = 1 ] && LLM_SETS+=(--set llm.parallel=4)
fi

# 3. the LLM alone (LLM_LEVELS= empty skips it) ---------------------------------------------------
[ -n "$LLM_LEVELS" ] && timeout 170 "$PY" bench/llm_alone.py --config examples/gpu.toml --set llm.temperature=1.0 "${DRY[@]}" "${LLM_SETS[@]}" \
  --levels "$LLM_LEVELS" --max-tokens 48 --server-log "$LOGS/llm-alone-server.log" --out "$OUT/llm_alone.json" \
  2>&1 | tee "$LOGS/llm_alone.log" | grep -E "^chats|server" | tee -a "$OUT/summary.txt"

# 4. cadence serve -------------------------------------------------------------------------------
SETS=(--set "admission.max_sessions=$MAX_LEVEL" --set admission.queue_size=0 --set admission.budget_gate=false
      --set llm.temperature=1.0 --set "llm.max_tokens=$REPLY_TOKENS" --set "llm.server_log=$LOGS/llm-server.log"
      --set budgets.window_s=900 --set gpu.check_measured=false --set server.log_call_turns=true
      "${DRY[@]}" "${LLM_SETS[@]}")
[ -n "${TTS_ENGINE:-}" ] && SETS+=(--set "tts.engine=$TTS_ENGINE")
[ -n "${LLM_REPLICAS:-}" ] && SETS+=(--set "llm.replicas=$LLM_REPLICAS")
[ -n "${KOKORO_COMPILE:-}" ] && SETS+=(--set "tts.kokoro_compile=$([ "$KOKORO_COMPILE" = 1 ] && echo true || echo false)")
[ "${KOKORO_GRAPHS:-1}" = 0 ] && SETS+=(--set tts.kokoro_cuda_graphs=false)
[ "${KOKORO_TEXT_GRAPHS:-1}" = 0 ] && SETS+=(--set tts.kokoro_text_graphs=false)
[ -n "${KOKORO_DTYPE:-}" ] && SETS+=(--set "tts.kokoro_dtype=$KOKORO_DTYPE")
# TURN_MODEL=engine: smart-turn batched on the GPU in the engine process that hosts Parakeet (agent/smart_turn),
# its weights from .cascade/smart_turn_v3.npz (bench/wheels_cascade.sh writes it: the image has no onnx package).
[ "${TURN_MODEL:-onnx}" = engine ] && SETS+=(--set vad.turn_model=engine --set vad.turn_weights=.cascade/smart_turn_v3.npz)
# SERVE_SETS: more cadence serve overrides, comma-separated (an A/B arm's knobs), e.g.
# SERVE_SETS=audio.forward_input_past_turn=false,phone.input_frame_ms=40
IFS=, read -r -a EXTRA_SETS <<< "${SERVE_SETS:-}"
for s in "${EXTRA_SETS[@]}"; do [ -n "$s" ] && SETS+=(--set "$s"); done
SETS+=(--set "server.workers=$WORKERS")  # explicit: gpu.toml's 0 (one per free core) would move the metrics port
if [ "$WORKERS" -gt 1 ]; then
  SETS+=(--set "server.metrics_listen=127.0.0.1:$MPORT"
         --set "admission.max_sessions=$((2 * MAX_LEVEL))")
  [ "${DRY_RUN:-0}" = 1 ] || [ "${ENGINE_PROCESS:-1}" = 1 ] \
    || SETS+=(--set gpu.asr_fraction=0.22 --set gpu.tts_fraction=0.36 --set gpu.llm_fraction=0.30)
fi
if [ "${ENGINE_PROCESS:-1}" = 1 ]; then
  SETS+=(--set server.engine_process=true --set "server.engine_log=$LOGS/engine.log" --set server.engine_report_s=5)
  [ "${ASR_ENGINE_PROCESS:-1}" = 0 ] && SETS+=(--set server.asr_engine_process=false)
  if [ -n "${TTS_ENGINES:-}" ]; then
    SETS+=(--set "server.tts_engines=$TTS_ENGINES")
    # each Kokoro engine measured ~7.4 GB at its warm-up peak: 0.20 of the card is ~14 GiB each for two
    [ "$TTS_ENGINES" -gt 1 ] && [ "${DRY_RUN:-0}" != 1 ] && SETS+=(--set "gpu.tts_fraction=${TTS_FRACTION:-0.20}")
  fi
else
  SETS+=(--set server.engine_process=false)
fi
"$PY" -m agent.cli serve --config examples/gpu.toml --port $PORT "${SETS[@]}" > "$LOGS/serve.log" 2>&1 &
SERVE_PID=$!
READY=0
for _ in $(seq 600); do
  grep -q "Cadence is ready" "$LOGS/serve.log" && { READY=1; break; }
  kill -0 $SERVE_PID 2>/dev/null || break
  [ "$(left)" -lt 120 ] && break
  sleep 1
done
grep -E "GPU memory|GPU memory plan|LLM \(|engines ready|engine process|GIL|refused|Error|error" "$LOGS/serve.log" | cut -c1-300 \
  | head -30 | tee -a "$OUT/summary.txt"
[ $READY -eq 1 ] || { say "cadence serve did not become ready"; tail -40 "$LOGS/serve.log"; exit 1; }
say "cadence serve ready; $(left) s left"

# 5. capacity over the phone line ----------------------------------------------------------------
CAP_T=$(($(left) - 20))
timeout "$CAP_T" "$PY" -m agent.cli capacity --config examples/gpu.toml --transport phone \
  --url "http://127.0.0.1:$PORT" --metrics-url "http://127.0.0.1:$MPORT" --prompts .cascade/prompts.npz --levels "$LEVELS" --warmup "$WARMUP" \
  --connect-over "${CONNECT_S:-0}" --pause-jitter "${PAUSE_JITTER:-0}" --hold "$HOLD" --max-wait "$MAX_WAIT" --all-levels --no-refine --records --out-dir "$OUT" \
  --write-config "$OUT/cadence-capacity.toml" 2>&1 | tee "$LOGS/capacity.log" \
  | grep -E "phone callers|capacity:|results|error" | tee -a "$OUT/summary.txt"
# Kokoro's load per 5 s over the levels (tick count, mean batch, busy, the first clauses' queue wait and the tick
# times since 2c1eafa): what an A/B of the GPU's sharing reads without opening logs.tar.gz
[ -f "$LOGS/engine.log" ] && grep "engine load" "$LOGS/engine.log" | grep "tts ticks" | grep -v "tts ticks 0 " \
  | sed -E -e 's/^.*([0-9]{2}:[0-9]{2}:[0-9]{2})[,.][0-9]+ .*(tts ticks [^;]*).*(first lane ticks [^;]*).*(first-clause wait [^;]*).*/kokoro \1 \2; \3; \4/;t' \
      -e 's/^.*([0-9]{2}:[0-9]{2}:[0-9]{2})[,.][0-9]+ .*(tts ticks [^;]*).*(first-clause wait [^;]*).*/kokoro \1 \2; \3/;t' \
      -e 's/^.*([0-9]{2}:[0-9]{2}:[0-9]{2})[,.][0-9]+ .*(tts ticks [^;]*).*/kokoro \1 \2/' \
  | cut -c1-300 | tee -a "$OUT/summary.txt"
# the session processes' full collections: each `GC:` line's longest pause when it is a generation-2 one (runs 102
# and 104 read these from logs.tar.gz by hand; the call teardown, 374fc80, should shrink them past 256 callers).
# From the first call on (not each process's start-up freeze, agent/runtime.py).
sed -n '/session phone-/,$p' "$LOGS/serve.log" 2>/dev/null | grep "GC: " | grep -oE "the longest [0-9]+ ms, generation 2, [0-9]+ objects" \
  | awk '{n++; if ($3 > m) m = $3; o += $7} END {printf "full collections >= 20 ms (the longest of each GC: line):" \
      " %d, longest %d ms, %d objects collected on average\n", n, m, n ? o / n : 0}' | tee -a "$OUT/summary.txt"
# an engine the watchdog stopped (a batcher tick past server.engine_stall_exit_s: a hung GPU, agent/engine_watchdog.py)
grep -h "a tick has run" "$LOGS"/engine*.log 2>/dev/null | cut -c1-300 | tee -a "$OUT/summary.txt"
curl -s "http://127.0.0.1:$MPORT/metrics" > "$LOGS/metrics-final.txt"
curl -s "http://127.0.0.1:$MPORT/health" > "$LOGS/health-final.json"
curl -s "http://127.0.0.1:$PORT/phone/calls" > "$LOGS/phone-calls.json"
