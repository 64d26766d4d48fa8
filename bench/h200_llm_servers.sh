#!/usr/bin/env bash
# The LLM servers side by side on one H200, in one device call: transformers serve (continuous batching, CUDA
# graphs; what runs 17-36 used) against llama.cpp's native llama-server built with CUDA here
# (bench/llama_server_build.sh), each serving a random-weight Llama-3.2-1B-shaped model (bf16 folder for
# transformers, f16 GGUF for llama.cpp), each started exactly as `cadence serve` starts it from
# examples/gpu.toml (gpu.llm_fraction 0.40), then bench/llm_alone.py: time to first token and between tokens
# at LEVELS chats sent at once (a voice agent's system prompt and a caller's sentence, replies of 48 tokens).
# Prepare here: bench/wheels_cascade.sh and bench/llama_server_src.sh; carry [".whl", ".cascade", ".llamacpp"].
# $OUT: llm_alone_llama_server.json, llm_alone_transformers.json, summary.txt, logs.tar.gz, and (when it fits
# the 16 MiB a file) llama-server.xz, the built binary, to carry to later calls as .llamacpp/bin/.
set -u -o pipefail
START=$(date +%s)
OUT=${OUT:-/tmp/llm-servers-out}
LOGS=/tmp/llm-servers-logs
LEVELS=${LEVELS:-1,8,32,64,128,256}
SRC_DIR=/tmp/llama.cpp-src
mkdir -p "$OUT" "$LOGS" /tmp/cadence
say() { echo "[$(( $(date +%s) - START )) s] $*" | tee -a "$OUT/summary.txt"; }
trap 'tar -czf "$OUT/logs.tar.gz" -C /tmp llm-servers-logs 2>/dev/null; say "done; files: $(ls "$OUT" | tr "\n" " ")"' EXIT
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  > "$LOGS/pip.log" 2>&1 || { say "pip install failed"; exit 1; }
export PYTHONPATH="$PWD:/tmp/site"
say "commit $(head -1 .cascade/COMMIT 2>/dev/null); $(nvcc --version 2>/dev/null | tail -1)"
[ -d "$SRC_DIR/llama.cpp" ] || bench/llama_src_unpack.sh "$SRC_DIR"
SRC_DIR=$SRC_DIR bash bench/llama_server_build.sh > "$LOGS/build.out" 2> "$LOGS/build.log" &
BUILD=$!
timeout 200 python3 bench/llm_checkpoint.py /tmp/cadence/llm --shape llama-3.2-1b > "$LOGS/llm_checkpoint.log" 2>&1 &
HF=$!
PYTHONPATH="$PYTHONPATH:$SRC_DIR/llama.cpp/gguf-py" timeout 300 python3 bench/llm_gguf_checkpoint.py /tmp/cadence/llm.gguf \
  --vocab "$SRC_DIR/llama.cpp/models/ggml-vocab-llama-bpe.gguf" > "$LOGS/gguf_checkpoint.log" 2>&1
say "gguf checkpoint rc=$?: $(tail -1 "$LOGS/gguf_checkpoint.log" | cut -c1-250)"
wait $HF; say "hf checkpoint rc=$?: $(tail -1 "$LOGS/llm_checkpoint.log" | cut -c1-200)"
wait $BUILD; BRC=$?
say "llama-server build rc=$BRC: $(grep -E "built|prebuilt|version" "$LOGS/build.log" | tr '\n' ' ' | cut -c1-300)"
[ $BRC -eq 0 ] || { tail -30 "$LOGS/build.log"; exit 1; }
BIN=$(tail -1 "$LOGS/build.out")
ls -la "$BIN" | tee -a "$OUT/summary.txt"
xz -T0 -6 -c "$BIN" > "$LOGS/llama-server.xz" && [ "$(stat -c %s "$LOGS/llama-server.xz")" -lt 16000000 ] \
  && cp "$LOGS/llama-server.xz" "$OUT/" && say "llama-server.xz $(stat -c %s "$OUT/llama-server.xz") bytes in OUT"
ldd "$BIN" | grep -E "cuda|cublas|not found" | tee -a "$OUT/summary.txt"

alone() {  # $1: name, rest: --set overrides
  local name=$1; shift
  timeout 200 python3 bench/llm_alone.py --config examples/gpu.toml --set llm.temperature=1.0 "$@" --levels "$LEVELS" \
    --max-tokens 48 --server-log "$LOGS/server-$name.log" --out "$OUT/llm_alone_$name.json" > "$LOGS/alone-$name.log" 2>&1
  say "$name rc=$?"; grep -E "^chats|Error|error" "$LOGS/alone-$name.log" | cut -c1-250 | tee -a "$OUT/summary.txt"
}
alone llama_server --set llm.server=llama-server --set llm.model=/tmp/cadence/llm.gguf --set "llm.server_path=$BIN"
alone transformers
