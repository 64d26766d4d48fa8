#!/usr/bin/env bash
# Device call 1 (twenty-third session): Kokoro's profile (bench/kokoro_profile.py) at batch 32 and 8; on an H200 also
# issue 19's server A/B (bench/server_ab.sh). Only small files come back.
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1); echo "GPU: $GPU"
export CADENCE_COMMIT=${C:?commit}
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  > /dev/null 2>&1
export PYTHONPATH=$PWD:/tmp/site PYTHONUNBUFFERED=1
for b in 32 8; do
  timeout 150 python3 bench/kokoro_profile.py --batch $b --out "$OUT/kokoro_profile_b$b.json" > "$OUT/kokoro_profile_b$b.log" 2>&1
  echo "[$(el) s] profile b$b rc=$?"
done
grep -v USDT "$OUT/kokoro_profile_b32.log" | head -80
case "$GPU" in
  *H200*) ARMS="default|CADENCE_BATCH_FILL=0|default" BUDGET_S=$((585 - $(el))) OUT=$OUT/server bash bench/server_ab.sh
          echo "[$(el) s] server A/B done";;
  *) echo "not an H200: issue 19's server A/B skipped";;
esac
ls -la "$OUT" "$OUT/server" 2>/dev/null
