"""Batch sizes by measured replay cost: the cheapest plan, and the batcher taking its first batch."""

from __future__ import annotations

import asyncio
import threading
from itertools import combinations_with_replacement

import numpy as np

from asr.offline.batch_cost import cheapest_plan, first_take, replay_rows
from asr.offline.window_batcher import WindowBatcher

COSTS = [(16, 0.012), (64, 0.034)]  # a 16 and a 64 replay of one class, as an H200 times 10 s windows


def plan_cost(plan: list[int], costs: list[tuple[int, float]]) -> float:
    return sum(next(s for b, s in sorted(costs) if b >= k) for k in plan)


def brute_force(n: int, costs: list[tuple[int, float]]) -> float:
    sizes = sorted(b for b, _ in costs)
    best = float("inf")
    for parts in range(1, n + 1):
        for combo in combinations_with_replacement(sizes, parts):
            if sum(combo) >= n and sum(combo) - max(combo) < n:
                left, plan = n, []
                for b in sorted(combo, reverse=True):
                    plan.append(min(b, left))
                    left -= plan[-1]
                if left == 0 and all(plan):
                    best = min(best, plan_cost(plan, costs))
        if parts * max(sizes) >= n + max(sizes):
            break
    return best


def test_the_plan_is_the_cheapest_and_runs_every_window() -> None:
    costs = [(8, 0.006), (16, 0.012), (32, 0.019), (64, 0.034)]
    for n in range(1, 80):
        plan = cheapest_plan(n, costs)
        assert sum(plan) == n and plan == sorted(plan, reverse=True)
        assert abs(plan_cost(plan, costs) - brute_force(n, costs)) < 1e-12, (n, plan)


def test_a_few_windows_over_the_small_batch_go_as_small_replays() -> None:
    assert cheapest_plan(20, COSTS) == [16, 4]  # two 16 replays (24 ms) beat one 64 (34 ms)
    assert cheapest_plan(39, COSTS) == [39]  # three 16 replays (36 ms) would cost more than one 64
    assert first_take(20, COSTS, 64) == 16
    assert first_take(39, COSTS, 64) == 39
    assert first_take(500, COSTS, 64) == 64
    assert first_take(20, None, 64) == 20  # no measured costs: as full as it can be
    assert first_take(20, [], 8) == 8


def test_the_batcher_sizes_its_batches_by_the_engines_costs() -> None:
    """20 pending windows of one class on an engine with a 16 and a 64 batch: 16 first, then 4; with
    CADENCE_BATCH_COSTS=0 (the A/B knob) one batch of 20. Every window gets its own words back."""
    release = threading.Event()

    class Engine:
        name, sample_rate, max_batch, languages = "costs", 16000, 64, None
        plan = None

        def __init__(self) -> None:
            self.batches: list[int] = []

        def length_class(self, samples: int) -> int:
            return 1024

        def batch_costs(self, length_class: int) -> list[tuple[int, float]]:
            return COSTS

        def transcribe_windows(self, windows: list[np.ndarray], language: str | None) -> list[list]:
            release.wait(30)
            self.batches.append(len(windows))
            return [[int(w[0])] for w in windows]

    def run(engine: Engine) -> list[list[list]]:
        batcher = WindowBatcher(engine)

        async def go() -> list[list[list]]:
            tasks = [asyncio.create_task(batcher.transcribe([np.full(160, k, dtype=np.float32)], None))
                     for k in range(20)]
            await asyncio.sleep(0.2)
            release.set()
            return list(await asyncio.gather(*tasks))

        try:
            return asyncio.run(go())
        finally:
            release.clear()
            batcher.close()

    engine = Engine()
    assert run(engine) == [[[k]] for k in range(20)]
    # the first request seeds a batch at once (the others are still queueing), then 16 and the rest
    assert sum(engine.batches) == 20 and max(engine.batches) <= 16, engine.batches


def test_the_ab_knob_turns_the_costs_off(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("CADENCE_BATCH_COSTS", "0")

    class Engine:
        name, sample_rate, max_batch, languages, plan = "costs", 16000, 64, None, None

        def batch_costs(self, length_class: int) -> list[tuple[int, float]]:
            return COSTS

    batcher = WindowBatcher(Engine())  # type: ignore[arg-type]
    try:
        assert batcher._batch_costs is None
    finally:
        batcher.close()


def test_replay_rows_is_the_smallest_profile_batch_holding_the_take() -> None:
    assert [replay_rows(n, COSTS) for n in (1, 16, 17, 64, 65)] == [16, 16, 64, 64, 65]
    assert replay_rows(5, None) == 5


class ThreeClasses:
    """Windows up to 0.1 / 0.2 / 0.3 s are classes 100 / 200 / 300, each replayed at a batch of 4. A window's
    words are its first sample; the first batch waits until ``release``."""

    name, sample_rate, max_batch, languages, plan = "three", 16000, 4, None, None

    def __init__(self) -> None:
        self.batches: list[list[int]] = []
        self.started, self.release = threading.Event(), threading.Event()

    def length_class(self, samples: int) -> int:
        return 100 * -(-samples // 1600)

    def batch_costs(self, length_class: int) -> list[tuple[int, float]]:
        return [(4, length_class / 1000)]

    def transcribe_windows(self, windows: list[np.ndarray], language: str | None) -> list[list]:
        self.started.set()
        self.release.wait(30)
        self.batches.append([self.length_class(len(w)) for w in windows])
        return [[int(w[0])] for w in windows]


def run_three_classes(engine: ThreeClasses) -> list[list[list]]:
    """One short window first (the engine holds it), then three long, two mid and two short ones queued."""
    batcher = WindowBatcher(engine)  # type: ignore[arg-type]

    def w(k: int, seconds: float) -> np.ndarray:
        return np.full(int(seconds * 16000), k, dtype=np.float32)

    requests = [[w(0, 0.05)], [w(1, 0.3), w(2, 0.25), w(3, 0.28)], [w(4, 0.15), w(5, 0.2)], [w(6, 0.1)],
                [w(7, 0.08)]]

    async def go() -> list[list[list]]:
        first = asyncio.create_task(batcher.transcribe(requests[0], None))
        await asyncio.to_thread(engine.started.wait, 30)
        rest = [asyncio.create_task(batcher.transcribe(r, None)) for r in requests[1:]]
        await asyncio.sleep(0.2)
        engine.release.set()
        return list(await asyncio.gather(first, *rest))

    try:
        got = asyncio.run(go())
    finally:
        batcher.close()
    assert got == [[[int(x[0])] for x in r] for r in requests]  # every window its own words
    return got


def test_a_replays_free_rows_carry_shorter_windows_the_longest_class_first() -> None:
    """Three long windows leave one row of their batch-4 replay free: the oldest mid window takes it, so the
    other mid window and the short ones need two more replays, not three."""
    engine = ThreeClasses()
    run_three_classes(engine)
    assert engine.batches == [[100], [300, 300, 300, 200], [100, 100], [200]], engine.batches


def test_the_ab_knob_turns_the_fill_off(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("CADENCE_BATCH_FILL", "0")
    engine = ThreeClasses()
    run_three_classes(engine)
    assert all(len(set(b)) == 1 for b in engine.batches) and len(engine.batches) == 4, engine.batches
