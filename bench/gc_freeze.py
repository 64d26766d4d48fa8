"""GC freeze, shown in one run: per-tick CPU time with a large warm heap, before and after.

A process that has loaded its models holds millions of long-lived objects. Every full
(generation 2) collection walks all of them, and one lands on whichever audio tick happens
to allocate the object that triggers it. ``gc.freeze()`` after warm-up moves the warm heap
out of the collector's sight. This bench builds such a heap, runs the same per-tick function
(allocates frame-like objects, keeps a ring of recent ones, does a little numeric work)
without and then with the freeze, and reports p50/p99/max tick time and the GC pauses.

    python bench/gc_freeze.py --heap-objects 3000000 --ticks 6000 --out bench/results/gc_freeze.json
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import platform
import sys
import time
from collections import deque


def build_heap(n: int) -> list:
    """``n`` long-lived container objects shaped like a library/model heap."""
    heap: list = []
    for i in range(n // 3):
        heap.append({"id": i, "name": "w", "shape": [i, 3]})  # dict + list
        heap.append((i, [i]))  # tuple + list
    return heap


class Ticker:
    """One audio tick's worth of Python work.

    Each tick makes short-lived frame objects that reference themselves (as objects holding
    callbacks, futures and tracebacks do), so young collections keep running, and keeps a
    small piece of per-stream state alive for a while (a ring), so objects keep reaching
    generation 2: that promotion is what eventually triggers a full collection.
    """

    def __init__(self, allocs: int, ring: int):
        self.allocs = allocs
        self.recent: deque = deque(maxlen=ring)

    def tick(self, k: int) -> float:
        acc = 0.0
        for j in range(self.allocs):
            frame = {"pts": k, "seq": j}
            frame["meta"] = [frame]  # a cycle: freed by the collector, young
            self.recent.append([k, j])  # state kept for a while: promoted, then freed
            acc += math.sqrt(j + 1.0)
        return acc


def percentile(sorted_values: list[float], q: float) -> float:
    pos = q / 100.0 * (len(sorted_values) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


def run_phase(ticker: Ticker, ticks: int) -> dict:
    pauses: list[tuple[int, float]] = []
    started: dict[str, float] = {}

    def on_gc(phase: str, info: dict) -> None:
        if phase == "start":
            started["t"] = time.perf_counter()
        elif "t" in started:
            pauses.append((info["generation"], (time.perf_counter() - started.pop("t")) * 1000.0))

    gc.callbacks.append(on_gc)
    durations: list[float] = []
    try:
        for k in range(ticks):
            t0 = time.perf_counter_ns()
            ticker.tick(k)
            durations.append((time.perf_counter_ns() - t0) / 1e6)
    finally:
        gc.callbacks.remove(on_gc)
    durations.sort()
    full = [ms for gen, ms in pauses if gen == 2]
    return {
        "ticks": ticks,
        "tick_p50_ms": percentile(durations, 50),
        "tick_p99_ms": percentile(durations, 99),
        "tick_p999_ms": percentile(durations, 99.9),
        "tick_max_ms": durations[-1],
        "collections": len(pauses),
        "full_collections": len(full),
        "full_collection_max_ms": max(full, default=0.0),
        "full_collection_total_ms": sum(full),
        "gc_pause_max_ms": max((ms for _, ms in pauses), default=0.0),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--heap-objects", type=int, default=3_000_000, help="long-lived container objects")
    ap.add_argument("--ticks", type=int, default=6000)
    ap.add_argument("--allocs", type=int, default=300, help="frame objects allocated per tick")
    ap.add_argument("--ring", type=int, default=20_000, help="state objects kept alive (they reach gen 2)")
    ap.add_argument("--out", help="write the JSON result here")
    args = ap.parse_args(argv)

    t0 = time.perf_counter()
    heap = build_heap(args.heap_objects)
    gc.collect()
    built_s = time.perf_counter() - t0
    tracked = len(gc.get_objects())
    print(f"warm heap: {tracked:,} GC-tracked objects (built in {built_s:.1f} s)", flush=True)

    ticker = Ticker(args.allocs, args.ring)
    ticker.tick(0)  # warm the tick's own code paths
    without = run_phase(ticker, args.ticks)

    ticker.recent.clear()
    t1 = time.perf_counter()
    gc.collect()
    gc.freeze()
    freeze_ms = (time.perf_counter() - t1) * 1000.0
    frozen = gc.get_freeze_count()
    with_freeze = run_phase(ticker, args.ticks)
    gc.unfreeze()

    result = {
        "command": "python bench/gc_freeze.py " + " ".join(sys.argv[1:] if argv is None else argv),
        "python": sys.version.split()[0],
        "machine": platform.machine(),
        "args": vars(args),
        "tracked_objects": tracked,
        "frozen_objects": frozen,
        "freeze_ms": freeze_ms,
        "without_freeze": without,
        "with_freeze": with_freeze,
    }
    print(f"{'':14s} {'p50 ms':>8s} {'p99 ms':>8s} {'p99.9 ms':>9s} {'max ms':>8s} {'full GCs':>9s} "
          f"{'max full GC ms':>15s}")
    for name, r in (("without freeze", without), ("with freeze", with_freeze)):
        print(f"{name:14s} {r['tick_p50_ms']:8.3f} {r['tick_p99_ms']:8.3f} {r['tick_p999_ms']:9.3f} "
              f"{r['tick_max_ms']:8.1f} {r['full_collections']:9d} {r['full_collection_max_ms']:15.1f}")
    gain = without["tick_max_ms"] / max(with_freeze["tick_max_ms"], 1e-9)
    print(f"freeze of {frozen:,} objects took {freeze_ms:.0f} ms; worst tick {gain:.0f}x shorter with it")
    if args.out:
        with open(args.out, "w") as f:
            json.dump(result, f, indent=2)
        print(f"wrote {args.out}")
    del heap
    return 0


if __name__ == "__main__":
    sys.exit(main())
