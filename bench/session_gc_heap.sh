#!/usr/bin/env bash
# The GC heap of each Cadence process under N phone callers on the CPU box (examples/gpu.toml's flow with toy
# models, as bench/cascade_cpu_box.sh runs it): what a full collection walks in the session process and in the
# engine processes while the calls run, what one such pass costs once they are idle, which modules were imported
# after the heap was frozen, and the full-collection pauses the server logged during the calls.
#
#   bash bench/session_gc_heap.sh [CALLERS]            # the working tree
#   BASE=<rev> bash bench/session_gc_heap.sh [CALLERS] # <rev> first (a git worktree), then the working tree
#
# -> $OUT (default /tmp/session-gc-heap)/{base,head}/{census/,serve.log,capacity.json} and summary.md (printed).
set -u -o pipefail
cd "$(dirname "$0")/.."
HERE=$PWD
N=${1:-16}
OUT=${OUT:-/tmp/session-gc-heap}; rm -rf "$OUT"; mkdir -p "$OUT"
PY=${PY:-$HERE/.venv/bin/python}
LEVERS=(audio.forward_input_past_turn=false phone.input_frame_ms=40 phone.output_frame_ms=40)
ARMS=(head)
if [ -n "${BASE:-}" ]; then
  WT=/tmp/session-gc-base
  git worktree remove --force "$WT" 2>/dev/null; rm -rf "$WT"
  git worktree add -q --detach "$WT" "$BASE" || exit 1
  ln -s "$HERE/.cascade" "$WT/.cascade"
  trap 'git -C "$HERE" worktree remove --force "$WT"' EXIT
  ARMS=(base head)
fi
for arm in "${ARMS[@]}"; do
  root=$HERE; [ "$arm" = base ] && root=$WT
  mkdir -p "$OUT/$arm"
  CADENCE_GC_CENSUS=$OUT/$arm/census PYTHONPATH=$HERE/bench/gc_census ROOT=$root PY=$PY HOLD=${HOLD:-40} \
    LINGER_S=25 PORT=${PORT:-7873} bash "$HERE/bench/cascade_cpu_box.sh" "gc-heap-$arm" "$N" "${LEVERS[@]}" \
    > "$OUT/$arm/run.out" 2>&1
  cp /tmp/cascade-cpu/gc-heap-$arm/{serve.log,capacity.json} "$OUT/$arm/"
  ( cd "$root" && git describe --always --dirty ) > "$OUT/$arm/commit"
done
"$PY" bench/gc_census_report.py "$OUT" | tee "$OUT/summary.md"
