#!/usr/bin/env bash
# Why is the served LLM slow? transformers serve --continuous-batching under several settings, one
# device call: the KV-cache size Cadence gives it (gpu.llm_fraction), CUDA graphs for the decode step
# (--cb-use-cuda-graph), sampling vs greedy. Each variant: bench/llm_alone.py at LEVELS concurrent chats,
# time to first token and time between tokens. Then, with the time left, the GPU tests named in
# GPU_TESTS (issue 14's full tests/gpu run, continued).
# Prepare here: bench/wheels_cascade.sh; the device call carries [".whl", ".cascade"].
set -u -o pipefail
START=$(date +%s)
BUDGET_S=${BUDGET_S:-560}
left() { echo $((START + BUDGET_S - $(date +%s))); }
OUT=${OUT:-/tmp/sweep-out}
LOGS=/tmp/sweep-logs
mkdir -p "$OUT" "$LOGS" /tmp/cadence
LEVELS=${LEVELS:-1,32,128}
TOKENS=${TOKENS:-32}
SHAPE=${SHAPE:-llama-3.2-1b}
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
say() { echo "[$(($(date +%s) - START)) s] $*" | tee -a "$OUT/summary.txt"; }
trap 'tar -czf "$OUT/logs.tar.gz" -C /tmp sweep-logs 2>/dev/null' EXIT
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
  .whl/*.whl > "$LOGS/pip.log" 2>&1 || { say "pip install failed"; tail -20 "$LOGS/pip.log"; exit 1; }
export PYTHONPATH="$PWD:/tmp/site${PYTHONPATH:+:$PYTHONPATH}"
say "commit $(head -1 .cascade/COMMIT 2>/dev/null)"
timeout 120 python3 bench/llm_checkpoint.py /tmp/cadence/llm --shape "$SHAPE" > "$LOGS/llm_checkpoint.log" 2>&1
say "llm checkpoint: $(tail -1 "$LOGS/llm_checkpoint.log" | cut -c1-200)"

# name | --set overrides (space-separated, each SECTION.KEY=VALUE)
VARIANTS=${VARIANTS:-"asis|
graph|llm.server_args=--cb-use-cuda-graph
small|gpu.llm_fraction=0.08
small_graph|gpu.llm_fraction=0.08 llm.server_args=--cb-use-cuda-graph
small_graph_greedy|gpu.llm_fraction=0.08 llm.server_args=--cb-use-cuda-graph llm.temperature=0.0"}
while IFS='|' read -r name sets; do
  [ -z "$name" ] && continue
  [ "$(left)" -lt 90 ] && { say "$name: skipped (time)"; continue; }
  args=()
  for s in $sets; do args+=(--set "$s"); done
  say "variant $name: ${sets:-as configured}"
  timeout $(( $(left) < 150 ? $(left) - 10 : 150 )) python3 bench/llm_alone.py --config examples/gpu.toml \
    --set llm.temperature=1.0 "${args[@]}" --levels "$LEVELS" --max-tokens "$TOKENS" \
    --server-log "$LOGS/server-$name.log" --out "$OUT/llm_$name.json" 2>&1 | tee "$LOGS/llm_$name.log" \
    | grep -E "^chats|Error|error" | cut -c1-220 | tee -a "$OUT/summary.txt"
  pkill -f "transformers serve" 2>/dev/null; pkill -f "transformers.cli" 2>/dev/null; sleep 1
done <<< "$VARIANTS"

if [ -n "${GPU_TESTS:-}" ] && [ "$(left)" -gt 40 ]; then
  say "tests: $GPU_TESTS ($(left) s left)"
  timeout $(($(left) - 10)) python3 -m pytest -q -p no:cacheprovider -ra $GPU_TESTS > "$LOGS/pytest_gpu.log" 2>&1
  say "pytest rc=$?: $(tail -1 "$LOGS/pytest_gpu.log")"
  grep -E "passed|failed|PASSED|FAILED|SKIPPED|Error" "$LOGS/pytest_gpu.log" | tail -15 | cut -c1-250 | tee -a "$OUT/summary.txt"
fi
nvidia-smi --query-gpu=memory.used,utilization.gpu --format=csv | tee -a "$OUT/summary.txt"
say done
