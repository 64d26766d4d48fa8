"""GPU replay time the server's window batcher spends on the length mix, against length-sorted batches (CPU model).

The fast Parakeet backend replays one CUDA graph per shape profile at its whole batch, so a batch's GPU time is
the sum of the replays it needs, whatever the count in each. This drives the real ``WindowBatcher`` with ``C``
closed-loop requests of the mix (``bench/transcribe_load``: 1-35 s, mean ~7 s; their real plan windows) on a
stand-in engine with the server's ten profiles (``offline_profiles(64)``) that sleeps each batch's replay time
as an H100 timed it (run 88's warm-up: ``REPLAY_MS``) and groups a batch as the engine does
(``parakeet_fast.cheapest_groups``). It prints that time for the batcher with and without filling a replay's
free rows with shorter windows (``CADENCE_BATCH_FILL``), next to the engine alone's length-sorted batches (as
``bench/transcribe_server.py`` times the engine alone). A model of batch composition only: no pipelining, no
host; the GPU figures are run 88's.

    python3 bench/batcher_replays.py [--concurrency 256] [--requests 2048]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.transcribe_load import clip_set, speech  # noqa: E402

# (frames, batch) -> ms of one replay: the server's warm-up on an H100 at df125d3 (bench/results/run88_*)
REPLAY_MS = {(384, 16): 6.1, (384, 64): 15.8, (640, 16): 9.6, (640, 64): 23.7, (1024, 16): 11.9, (1024, 64): 32.0,
             (2048, 16): 20.0, (2048, 64): 63.3, (3008, 8): 18.6, (3008, 64): 85.5}


class ReplayEngine:
    """The fast backend's batch plan (classes, timed costs, grouping) with sleeps in place of replays."""

    name, sample_rate, max_batch, languages = "replays", 16000, 64, None

    def __init__(self, scale: float) -> None:
        from asr.offline.plan import PlanOptions
        from asr.parakeet.encoders.shape_profiles import offline_profiles, parse_profiles

        self.plan, self.scale = PlanOptions(), scale
        self.profiles = parse_profiles(offline_profiles(64))
        self.replay_s = {k: ms / 1000 for k, ms in REPLAY_MS.items()}
        self.gpu_s, self.calls, self.sizes = 0.0, 0, []

    def length_class(self, samples: int) -> int:
        frames = int(samples) // 160 + 1
        return next((p for p in sorted(x.frames for x in self.profiles) if p >= frames), 1 << 30)

    def batch_costs(self, length_class: int) -> list[tuple[int, float]]:
        return sorted((b, s) for (f, b), s in self.replay_s.items() if f == length_class)

    def cost(self, lengths: list[int]) -> float:
        from asr.offline.parakeet_fast import cheapest_groups, plan_cost, profile_groups

        groups = cheapest_groups(lengths, profile_groups(lengths, self.profiles), self.profiles, self.replay_s)
        return sum(plan_cost(self.profiles, self.replay_s, len(g), max(lengths[i] for i in g)) or 0.0 for g in groups)

    def transcribe_windows(self, windows: list, language: str | None) -> list[list]:
        cost = self.cost([len(w) for w in windows])
        self.gpu_s, self.calls = self.gpu_s + cost, self.calls + 1
        self.sizes.append(len(windows))
        time.sleep(cost * self.scale)
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


def arm(fill: bool, per_clip: list[list], args: argparse.Namespace) -> ReplayEngine:
    from asr.offline.window_batcher import WindowBatcher

    os.environ["CADENCE_BATCH_FILL"] = "1" if fill else "0"
    engine = ReplayEngine(args.scale)
    batcher = WindowBatcher(engine)  # type: ignore[arg-type]
    try:
        latencies = sorted(asyncio.run(closed_loop(batcher, per_clip, args.requests, args.concurrency)))
    finally:
        batcher.close()
    windows = sum(engine.sizes)
    print(f"fill {'on ' if fill else 'off'}: {windows} windows in {engine.calls} batches ({windows / engine.calls:.1f} "
          f"a batch), replay time {engine.gpu_s:.2f} s; latency p50 {statistics.median(latencies) * 1000:.0f} ms",
          flush=True)
    return engine


def main() -> None:
    from asr.offline.plan import plan_windows
    from asr.offline.window_batcher import length_batches

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--concurrency", type=int, default=256)
    ap.add_argument("--requests", type=int, default=2048)
    ap.add_argument("--scale", type=float, default=1.0, help="sleep this times each replay's time")
    args = ap.parse_args()
    per_clip = [[w.audio(a) for w in plan_windows(a, 16000)] for a in (speech(s, k) for s, k in clip_set("mix", 1))]
    windows = [w for i in range(args.requests) for w in per_clip[i % len(per_clip)]]
    model = ReplayEngine(0.0)
    alone = sum(model.cost([len(windows[i]) for i in b]) for b in length_batches([len(w) for w in windows], 64))
    audio_s = sum(len(w) for w in windows) / 16000  # windows overlap a little where clips pass 30 s
    print(f"{args.requests} requests of the mix ({audio_s:.0f} s of windows), {args.concurrency} in flight; engine "
          f"alone, length-sorted batches of 64: replay time {alone:.2f} s", flush=True)
    off, on = arm(False, per_clip, args), arm(True, per_clip, args)
    print(f"replay time vs the engine alone: fill off {off.gpu_s / alone:.2f}x, fill on {on.gpu_s / alone:.2f}x; "
          f"fill on / off {on.gpu_s / off.gpu_s:.2f}")


if __name__ == "__main__":
    main()
