"""Profile replays the server's batcher costs on the length mix, against length-sorted batches (CPU, seconds).

The fast Parakeet backend replays one CUDA graph per length profile (10/20/30 s) at its whole batch,
so a batch's GPU cost is the sum over the profiles it touches, whatever the count in each. This
drives the real ``WindowBatcher`` with ``C`` closed-loop requests of the mix (``bench/transcribe_load``:
1-35 s, mean ~7 s; their real plan windows) on a stand-in engine that sleeps each batch's replay cost
(relative costs 1 / 2.1 / 3.3 per profile), and prints that cost next to the engine-alone pass's
(``length_batches``, as ``bench/transcribe_server.py`` times the engine alone):

    python3 bench/batcher_replays.py                 # classes on (the fast backend's length_class)
    python3 bench/batcher_replays.py --no-classes    # the batcher as it was: closest length, any class
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.transcribe_load import clip_set, speech  # noqa: E402

HOP, BATCH = 160, 64
PROFILES = {1024: 1.0, 2048: 2.1, 3008: 3.3}  # frames -> relative replay cost


def profile(samples: int) -> int:
    return next(f for f in sorted(PROFILES) if f >= samples // HOP + 1)


def replays(lengths: list[int]) -> float:
    counts: dict[int, int] = {}
    for n in lengths:
        counts[profile(n)] = counts.get(profile(n), 0) + 1
    return sum(PROFILES[f] * -(-c // BATCH) for f, c in counts.items())


class ReplayEngine:
    name, sample_rate, max_batch, languages = "replays", 16000, BATCH, None

    def __init__(self, unit_s: float, classes: bool) -> None:
        from asr.offline.plan import PlanOptions

        self.plan, self.unit_s, self.cost, self.calls = PlanOptions(), unit_s, 0.0, 0
        if classes:
            self.length_class = profile

    def transcribe_windows(self, windows: list, language: str | None) -> list[list]:
        cost = replays([len(w) for w in windows])
        self.cost, self.calls = self.cost + cost, self.calls + 1
        time.sleep(cost * self.unit_s)
        return [[] for _ in windows]


async def closed_loop(batcher, per_clip: list[list], requests: int, concurrency: int) -> list[float]:  # type: ignore[no-untyped-def]
    todo, latencies = iter(range(requests)), []

    async def client() -> None:
        for i in todo:
            t0 = time.perf_counter()
            await batcher.transcribe(per_clip[i % len(per_clip)], None)
            latencies.append(time.perf_counter() - t0)
            await asyncio.sleep(0.002)  # the host's round trip before this client's next request

    await asyncio.gather(*(client() for _ in range(concurrency)))
    return latencies


def main() -> None:
    from asr.offline.plan import plan_windows
    from asr.offline.window_batcher import WindowBatcher, length_batches

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--concurrency", type=int, default=256)
    ap.add_argument("--requests", type=int, default=1024)
    ap.add_argument("--unit-ms", type=float, default=10.0, help="sleep per 10 s profile replay")
    ap.add_argument("--no-classes", action="store_true")
    args = ap.parse_args()
    per_clip = [[w.audio(a) for w in plan_windows(a, 16000)] for a in (speech(s, k) for s, k in clip_set("mix", 1))]
    windows = [w for i in range(args.requests) for w in per_clip[i % len(per_clip)]]
    alone = sum(replays([len(windows[i]) for i in b]) for b in length_batches([len(w) for w in windows], BATCH))
    engine = ReplayEngine(args.unit_ms / 1000, not args.no_classes)
    batcher = WindowBatcher(engine)
    try:
        latencies = asyncio.run(closed_loop(batcher, per_clip, args.requests, args.concurrency))
    finally:
        batcher.close()
    latencies.sort()
    print(f"classes {'off' if args.no_classes else 'on'}: {len(windows)} windows, {engine.calls} batches, replay cost "
          f"{engine.cost:.1f} (engine alone, length-sorted: {alone:.1f}; alone / server {alone / engine.cost:.2f}); "
          f"latency p50 {statistics.median(latencies) * 1000:.0f} ms, p99 {latencies[int(0.99 * len(latencies))] * 1000:.0f} ms")


if __name__ == "__main__":
    main()
