"""In-process Kokoro against Kokoro in an engine process, under N concurrent sessions on a busy event loop.

Each synthetic session takes turns: a 2-3 clause reply is synthesized through ``synthesize_stream``
(the seam ``CadenceTTSService`` uses), then it thinks 0.3-1.0 s. Beside the sessions, the event loop
is kept as busy as pipecat keeps it: every 20 ms each session spends ``--busy-ms`` of pure Python
(0.9 ms: the ~45 ms of CPU per caller-second measured for pipecat's frames). Modes:

- ``in_process``: ``KokoroEngine`` in this process (its batcher thread and phonemization share this
  interpreter with the busy loop, as in ``cadence serve`` today);
- ``engine_process``: ``agent.engine_process.ManagedEngineProcess`` (``server.engine_process = true``),
  this process a client over the Unix socket.

Per level: time to first audio p50/p99 (request -> first clause's PCM), delivery ratio p1/p50 per turn
(audio seconds / seconds from request to last piece; below 1 the listener would hear gaps), event-loop
lag p99, the engine's batch sizes. Both sides run torch with one intra-op thread.

Usage: python bench/engine_process.py [--levels 4,8,16] [--duration 15] [--tiny] [--out NAME]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import write_result  # noqa: E402

REPLIES = [
    "Sure, I can help with that. Your order shipped this morning. It should arrive on Friday.",
    "Thanks for waiting, I found your account. The payment went through yesterday.",
    "Of course, let me check that for you. The store opens at nine and closes at six.",
    "I am sorry about the delay. A technician will call you before noon tomorrow.",
    "Yes, that works. I have moved your appointment to Tuesday at three in the afternoon.",
]
SAMPLE_RATE = 24000


def pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    values = sorted(values)
    return round(values[min(len(values) - 1, int(q / 100 * len(values)))], 3)


async def busy_loop(stop: asyncio.Event, busy_ms: float) -> None:
    """One session's share of pipecat's event-loop work: ``busy_ms`` of Python every 20 ms."""
    while not stop.is_set():
        end = time.perf_counter() + busy_ms / 1000
        n = 0
        while time.perf_counter() < end:
            n += 1
        await asyncio.sleep(0.02)


async def lag_probe(stop: asyncio.Event, lags: list[float]) -> None:
    while not stop.is_set():
        t = time.perf_counter()
        await asyncio.sleep(0.01)
        lags.append((time.perf_counter() - t - 0.01) * 1000)


async def session(engine: Any, stop: asyncio.Event, rng: random.Random, ttfa: list[float],
                  delivery: list[float]) -> None:
    await asyncio.sleep(rng.uniform(0, 1.0))  # callers do not all start on the same tick
    while not stop.is_set():
        text = rng.choice(REPLIES)
        t0 = time.perf_counter()
        first, audio_bytes = None, 0
        async for pcm in engine.synthesize_stream(text):
            now = time.perf_counter()
            if first is None:
                first = now - t0
            audio_bytes += len(pcm)
        if first is not None and not stop.is_set():
            ttfa.append(first * 1000)
            delivery.append(audio_bytes / 2 / SAMPLE_RATE / max(1e-6, time.perf_counter() - t0))
        await asyncio.sleep(rng.uniform(0.3, 1.0))


async def run_level(engine: Any, n: int, duration: float, busy_ms: float) -> dict[str, Any]:
    stop = asyncio.Event()
    ttfa: list[float] = []
    delivery: list[float] = []
    lags: list[float] = []
    tasks = [asyncio.create_task(busy_loop(stop, busy_ms)) for _ in range(n)]
    tasks += [asyncio.create_task(session(engine, stop, random.Random(i), ttfa, delivery)) for i in range(n)]
    tasks.append(asyncio.create_task(lag_probe(stop, lags)))
    await asyncio.sleep(duration)
    stop.set()
    await asyncio.wait_for(asyncio.gather(*tasks), 120)
    return {"sessions": n, "turns": len(ttfa), "ttfa_ms_p50": pct(ttfa, 50), "ttfa_ms_p99": pct(ttfa, 99),
            "delivery_p1": pct(delivery, 1), "delivery_p50": pct(delivery, 50),
            "loop_lag_ms_p99": pct(lags, 99), "loop_lag_ms_mean": round(statistics.fmean(lags), 2) if lags else None}


def kokoro_options(tiny: bool) -> dict[str, Any]:
    return {"tiny": tiny, "device": "cpu", "warmup": False, "g2p": "espeak", "max_batch": 64}


async def in_process(levels: list[int], duration: float, busy_ms: float, tiny: bool) -> list[dict]:
    import torch

    from agent.engine_server import engine_stats
    from tts.kokoro.engine import KokoroEngine
    from tts.kokoro.options import KokoroOptions

    torch.set_num_threads(1)
    engine = KokoroEngine(KokoroOptions(**kokoro_options(tiny)))
    rows = []
    try:
        async for _ in engine.synthesize_stream("Hello there."):
            pass
        for n in levels:
            before = engine_stats(engine)["batch_sizes"]
            row = await run_level(engine, n, duration, busy_ms)
            row["batch_sizes"] = _diff(before, engine_stats(engine)["batch_sizes"])
            rows.append({"mode": "in_process", **row})
            print(rows[-1], flush=True)
    finally:
        engine.close()
    return rows


async def engine_process(levels: list[int], duration: float, busy_ms: float, tiny: bool) -> list[dict]:
    from agent.engine_process import ManagedEngineProcess
    from tts.remote.client import RemoteTTSEngine

    spec = {"tts": {"engine": "kokoro"}, "kokoro": kokoro_options(tiny)}
    managed = ManagedEngineProcess(spec, start_timeout_s=300, env=dict(os.environ, OMP_NUM_THREADS="1"))
    await managed.astart()
    rows = []
    try:
        engine = RemoteTTSEngine(managed.socket_path)
        for n in levels:
            before = (await engine.call("stats"))["stats"]["batch_sizes"]
            row = await run_level(engine, n, duration, busy_ms)
            row["batch_sizes"] = _diff(before, (await engine.call("stats"))["stats"]["batch_sizes"])
            rows.append({"mode": "engine_process", **row})
            print(rows[-1], flush=True)
        await engine.aclose()
    finally:
        managed.stop()
    return rows


def _diff(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    return {k: v - before.get(k, 0) for k, v in after.items() if v - before.get(k, 0)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--levels", default="4,8,16")
    parser.add_argument("--duration", type=float, default=15.0, help="seconds per level")
    parser.add_argument("--busy-ms", type=float, default=0.9, help="Python work per session per 20 ms")
    parser.add_argument("--tiny", action=argparse.BooleanOptionalAction, default=True,
                        help="tiny random Kokoro (default; --no-tiny: the full 82M architecture, slow on a CPU)")
    parser.add_argument("--modes", default="in_process,engine_process")
    parser.add_argument("--out", default="engine_process_cpu")
    parser.add_argument("--note", default="", help="stored with the results (e.g. that the cores were shared)")
    args = parser.parse_args()
    levels = [int(x) for x in args.levels.split(",")]
    rows: list[dict] = []
    for mode in args.modes.split(","):
        run = {"in_process": in_process, "engine_process": engine_process}[mode]
        rows += asyncio.run(run(levels, args.duration, args.busy_ms, args.tiny))
    path = write_result(args.out, {"levels": levels, "duration_s": args.duration, "busy_ms": args.busy_ms,
                                   "tiny": args.tiny, "note": args.note, "rows": rows})
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
