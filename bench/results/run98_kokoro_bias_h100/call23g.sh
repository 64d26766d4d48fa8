#!/usr/bin/env bash
# Device call 6, second try (twenty-third session), 458 s of device time left. On an H200: issue 19's server A/B at
# the defaults, two passes (bench/server_ab.sh). Else (H100): .cascade/call23f.sh (Kokoro's bias-free convolutions).
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1); echo "GPU: $GPU"
case "$GPU" in
  *H200*) ARMS="default|default" BUDGET_S=${SERVER_BUDGET_S:-350} CADENCE_COMMIT=$C OUT=$OUT/server bash bench/server_ab.sh
          cat "$OUT/server/summary.txt"; ls -la "$OUT/server";;
  *) bash .cascade/call23f.sh;;
esac
