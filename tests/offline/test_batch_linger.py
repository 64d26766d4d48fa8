"""``CADENCE_BATCH_LINGER_MS``: with a batch in flight on a pipelined engine, a next batch short of full waits (up to
the linger) for windows that arrive meanwhile, instead of going at once and leaving them to the batch after. Off (the
default), the next batch takes what is queued. The engine here is a stand-in that records each launch's size and lets
the test decide when a batch counts as encoded."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import numpy as np

from asr.offline.window_batcher import WindowBatcher


class StepEngine:
    """Pipelined: ``launch_windows`` returns at once; ``wait_encoded`` blocks on the test's ``encoded`` event for
    the first batch; every window's words are one word naming its length."""

    pipelined = True
    name, sample_rate, languages, max_batch = "step", 16000, None, 4

    def __init__(self) -> None:
        self.sizes: list[int] = []
        self.launched = threading.Event()
        self.encoded = threading.Event()
        self.waited = threading.Event()

    def length_class(self, n: int) -> int:
        return 0

    def launch_windows(self, windows: list[np.ndarray], language: str | None) -> list[int]:
        self.sizes.append(len(windows))
        self.launched.set()
        return [len(w) for w in windows]

    def wait_encoded(self, ticket: list[int]) -> None:
        if len(self.sizes) == 1:
            self.encoded.wait(10)
        self.waited.set()

    def finish_windows(self, ticket: list[int]) -> list[list[Any]]:
        return [[n] for n in ticket]


def _run(linger_ms: str, monkeypatch: Any) -> tuple[list[int], list[list[list[Any]]], dict]:
    monkeypatch.setenv("CADENCE_BATCH_LINGER_MS", linger_ms)
    engine = StepEngine()
    batcher = WindowBatcher(engine)  # type: ignore[arg-type]

    def windows(*seconds: float) -> list[np.ndarray]:
        return [np.zeros(int(s * 16000), np.float32) for s in seconds]

    async def go() -> tuple[list[list[list[Any]]], dict]:
        first = asyncio.create_task(batcher.transcribe(windows(1, 1, 1, 1), None))  # a full batch
        await asyncio.to_thread(engine.launched.wait, 10)
        second = asyncio.create_task(batcher.transcribe(windows(2, 2), None))  # queued while the first is in flight
        await asyncio.sleep(0.05)
        engine.encoded.set()  # the first batch is encoded: the next one is chosen now
        await asyncio.to_thread(engine.waited.wait, 10)
        await asyncio.sleep(0.05)  # these come back from answered requests a moment later
        third = asyncio.create_task(batcher.transcribe(windows(3, 3), None))
        results = await asyncio.gather(first, second, third)
        return list(results), await batcher.health()

    try:
        results, health = asyncio.run(go())
    finally:
        batcher.close()
    return engine.sizes, results, health


def test_off_the_next_batch_goes_with_what_is_queued(monkeypatch):
    sizes, results, health = _run("0", monkeypatch)
    assert sizes == [4, 2, 2] and health["lingers"] == 0
    assert results == [[[16000]] * 4, [[32000]] * 2, [[48000]] * 2]  # every window its own words


def test_a_linger_lets_windows_that_arrive_meanwhile_join_the_next_batch(monkeypatch):
    sizes, results, health = _run("2000", monkeypatch)
    assert sizes == [4, 4]  # the second batch waited for the third request's windows: one replay fewer
    assert results == [[[16000]] * 4, [[32000]] * 2, [[48000]] * 2]
    assert health["lingers"] >= 1 and 0.03 < health["linger_s"] < 2.0  # it ended when the class filled
