"""Run concurrency levels against one server's engines and judge each in steady state.

For a level of N callers: they connect staggered over the warm-up, talk and listen until
``warmup_s + hold_s``, and only turns that end inside the hold are judged. The server-side
stage histograms (the same ``MetricsObserver``s a live server uses) are cleared when the
hold starts, so the budgets are judged on the steady state alone.
"""

from __future__ import annotations

import asyncio
import random
import time
from dataclasses import dataclass

from loguru import logger

from agent.capacity.analysis import LevelResult, judge_level, knee, next_level
from agent.capacity.caller import CallRecord, call
from agent.capacity.corpus import Utterance, deal
from agent.metrics_http import ServerMetrics
from transports.params import transport_params


@dataclass
class RampOptions:
    ramp: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64)
    warmup_s: float = 10.0
    hold_s: float = 45.0
    max_wait_s: float = 15.0
    refine: bool = True
    seed: int = 1


async def run_level(server, metrics: ServerMetrics, corpus: list[Utterance], n: int,
                    opts: RampOptions) -> tuple[LevelResult, list[CallRecord]]:
    cfg = server.config
    params = transport_params(cfg.audio.in_sample_rate, cfg.audio.out_sample_rate)
    rng = random.Random(opts.seed * 1000 + n)
    t0 = time.monotonic()
    steady_from = t0 + opts.warmup_s
    stop_at = steady_from + opts.hold_s
    turns_per_caller = max(4, int((opts.warmup_s + opts.hold_s) / 4.0) + 2)

    async def one(i: int) -> CallRecord:
        await asyncio.sleep(rng.uniform(0.0, opts.warmup_s * 0.6))
        return await call(server.run_caller, params, i, deal(corpus, i, turns_per_caller, n),
                          stop_at=stop_at, max_wait_s=opts.max_wait_s)

    async def start_steady_state() -> None:
        await asyncio.sleep(max(0.0, steady_from - time.monotonic()))
        metrics.stages.clear()

    clearer = asyncio.create_task(start_steady_state())
    records = await asyncio.gather(*(one(i) for i in range(n)))
    await clearer
    breached = metrics.budgets.evaluate()
    result = judge_level(n, list(records), steady_from, stop_at, cfg.budgets.output_rt_ratio_min,
                         [s.describe() for s in breached])
    result.stage_tails = {name: st.tail for name, st in metrics.budgets.states.items()}
    failed = [r.refused for r in records if r.refused]
    if failed:
        result.reasons.append(f"{len(failed)} caller(s) failed: {failed[0]}")
        result.passed = False
    return result, list(records)


def describe(level: LevelResult) -> str:
    def f(v: float | None, unit: str = "") -> str:
        return "-" if v is None else f"{v:.2f}{unit}" if unit == "x" else f"{v:.0f}{unit}"

    verdict = "PASS" if level.passed else "FAIL: " + "; ".join(level.reasons)
    return (f"{level.concurrency:3d} callers: p99 delivery {f(level.p99_ratio, 'x')} (p50 {f(level.p50_ratio, 'x')}), "
            f"first audio p50 {f(level.first_audio_p50_ms, ' ms')} p99 {f(level.first_audio_p99_ms, ' ms')}, "
            f"chunk lateness p99 {f(level.lateness_p99_ms, ' ms')} max {f(level.lateness_max_ms, ' ms')}, "
            f"{level.turns} turns -> {verdict}")


async def find_capacity(server, metrics: ServerMetrics, corpus: list[Utterance],
                        opts: RampOptions) -> tuple[int, list[LevelResult]]:
    """Ramp up, stop at the first failing level, bisect towards it; return (cap, levels)."""
    levels: list[LevelResult] = []
    ramp = list(opts.ramp)
    n = next_level(levels, ramp, opts.refine)
    while n is not None:
        logger.info(f"capacity: {n} concurrent callers for {opts.warmup_s:.0f} + {opts.hold_s:.0f} s")
        level, _records = await run_level(server, metrics, corpus, n, opts)
        levels.append(level)
        print(describe(level), flush=True)
        n = next_level(levels, ramp, opts.refine)
    return knee(levels), sorted(levels, key=lambda r: r.concurrency)
