#!/usr/bin/env bash
# Device call 2: Kokoro eager / compiled / each on CUDA graphs, profiled (bench/kokoro_profile.py --compile --graphs).
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1); echo "GPU: $GPU"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  > /dev/null 2>&1
export PYTHONPATH=$PWD:/tmp/site PYTHONUNBUFFERED=1 TORCHINDUCTOR_CACHE_DIR=/tmp/cadence-inductor
for b in 32 8; do
  timeout 280 python3 bench/kokoro_profile.py --batch $b --compile --graphs --out "$OUT/kokoro_compile_b$b.json" \
    > "$OUT/kokoro_compile_b$b.log" 2>&1
  echo "[$(el) s] b$b rc=$?"
  grep -v -E "USDT|UserWarning|_warn_once" "$OUT/kokoro_compile_b$b.log" | grep -v "^  conv" | head -60
done
