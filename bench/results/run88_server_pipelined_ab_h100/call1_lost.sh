#!/usr/bin/env bash
# Device call (twenty-second session): df125d3's pipelined window batcher on the GPU.
# 1. tests/gpu/test_pipelined_calls_gpu.py: submitted calls == calls one at a time;
# 2. issue 19's server step at the defaults (pipelined), cold; 3. the same with CADENCE_PIPELINE_BATCHES=0 (one
# batch on the engine at a time, as before df125d3); 4. the pipelined step again if the call has time.
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1); echo "GPU: $GPU"
export CADENCE_COMMIT=${C:?commit}
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  > /dev/null 2>&1
mkdir -p "$OUT/gpu_test"
PYTHONPATH=$PWD:/tmp/site TORCHINDUCTOR_CACHE_DIR=/tmp/cadence-inductor timeout 200 python3 -m pytest -q -rs -s \
  -p no:cacheprovider tests/gpu/test_pipelined_calls_gpu.py > "$OUT/gpu_test/pytest.log" 2>&1
echo "[$(el) s] pytest rc=$?: $(tail -1 "$OUT/gpu_test/pytest.log")"
pack() { (cd "$OUT" && tar -czf "$1.tgz" "$1" && rm -rf "$1"); }
OUT=$OUT/pipe1 STEPS=server bash bench/h200_verify.sh; pack pipe1; echo "[$(el) s] pipe1 done"
CADENCE_PIPELINE_BATCHES=0 OUT=$OUT/seq STEPS=server bash bench/h200_verify.sh; pack seq; echo "[$(el) s] seq done"
if [ "$(el)" -lt 430 ]; then
  OUT=$OUT/pipe2 STEPS=server bash bench/h200_verify.sh; pack pipe2; echo "[$(el) s] pipe2 done"
fi
ls -la "$OUT"
