# Sourced by the one-call H200 scripts (bench/h200_tts_server.sh, bench/h200_server_profiles.sh) after they set
# OUT: the clock and say() (a line to the terminal and $OUT/summary.txt), the carried wheels (.whl/) installed
# into /tmp/site, the environment the benchmarks run in, and the commit and GPU as the first summary line.
START=$(date +%s)
mkdir -p "$OUT"
say() { echo "[$(($(date +%s) - START)) s] $*" | tee -a "$OUT/summary.txt"; }
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
  .whl/*.whl > "$OUT/pip.log" 2>&1 || { say "pip install failed"; tail -20 "$OUT/pip.log"; exit 1; }
export PYTHONPATH="$PWD:/tmp/site${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1
export TORCHINDUCTOR_CACHE_DIR=/tmp/cadence-inductor
# shellcheck source=bench/compile_cache.sh
source bench/compile_cache.sh && compile_cache_on && say "$(compile_cache_status)"
# the commit: the call's CADENCE_COMMIT=<hash> first (the tree travels without .git); else .cascade/COMMIT, only as fresh as the
# last bench/wheels_cascade.sh (run 65's first pass said 07f99aa for a tree at 539bb48)
CADENCE_COMMIT="${CADENCE_COMMIT:-$(head -1 .cascade/COMMIT 2>/dev/null || echo unknown)}"
export CADENCE_COMMIT
say "commit $CADENCE_COMMIT; $(nvidia-smi --query-gpu=name,memory.total --format=csv,noheader 2>/dev/null || echo 'no nvidia-smi')"
