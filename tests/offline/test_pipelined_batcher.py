"""The window batcher with a pipelined engine (``launch_windows`` returns before the work is done, as the CUDA
transcriber's does): the next batch is handed over before this one's words are read, every window still gets
exactly its own words, a batch the engine fails fails only its own requests, and closing settles the batch in
flight. The engine here is the tiny fast Parakeet engine run on a worker thread."""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import numpy as np
import pytest

from asr.offline.window_engine import EngineSpec

pytest.importorskip("torch")
pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def fast(tmp_path_factory: pytest.TempPathFactory) -> Any:
    from asr.offline.engine_factory import make_engine
    from asr.parakeet.tiny import make_tiny_checkpoint

    ckpt = make_tiny_checkpoint(tmp_path_factory.mktemp("tiny") / "ckpt")
    return make_engine(EngineSpec(engine="parakeet", model=str(ckpt), device="cpu", parakeet_backend="fast",
                                  profiles="a=3x256,b=3x512,c=3x1024"))


class ThreadedEngine:
    """The fast engine on one worker thread: ``launch_windows`` returns at once; a log of launches and
    finishes; ``fail`` names a batch whose results raise, as a device fault surfacing at the sync would."""

    pipelined = True

    def __init__(self, fast: Any, fail: int | None = None) -> None:
        self.fast = fast
        self.name, self.sample_rate, self.plan, self.languages = fast.name, 16000, fast.plan, None
        self.max_batch, self.length_class = 3, fast.length_class
        self.pool = ThreadPoolExecutor(1)
        self.log: list[tuple[str, int]] = []
        self.release = threading.Event()
        self.fail = fail

    def launch_windows(self, windows: list[np.ndarray], language: str | None) -> tuple[int, Future[Any]]:
        self.release.wait(30)
        k = sum(1 for what, _ in self.log if what == "launch")
        self.log.append(("launch", k))
        return k, self.pool.submit(self.fast.transcribe_windows, windows, language)

    def wait_encoded(self, ticket: tuple[int, Future[Any]]) -> None:
        if ticket[0] == self.fail:  # a fault shows at the first sync on the batch
            raise RuntimeError("device fault")

    def finish_windows(self, ticket: tuple[int, Future[Any]]) -> list[Any]:
        k, work = ticket
        self.log.append(("finish", k))
        words = work.result()
        if k == self.fail:
            raise RuntimeError("device fault")
        return words

    def transcribe_windows(self, windows: list[np.ndarray], language: str | None) -> list[Any]:
        raise AssertionError("a pipelined engine is launched and finished, not called whole")


def cuts() -> list[list[np.ndarray]]:
    from testkit.offline_audio import speech_track

    audio, _ = speech_track(40, seed=6)
    cut = [audio[int(i * 16000):int((i + s) * 16000)] for i, s in enumerate([8.0, 2.0, 1.5, 4.0, 3.0, 1.0, 4.5,
                                                                              2.2, 7.0, 1.2])]
    return [[cut[0], cut[1]], [cut[2], cut[3], cut[4]], [cut[5]], [cut[6], cut[7]], [cut[8], cut[9]]]


def run(batcher: Any, engine: ThreadedEngine, requests: list[list[np.ndarray]]) -> list[Any]:
    async def go() -> list[Any]:
        tasks = [asyncio.create_task(batcher.transcribe(r, None)) for r in requests]
        await asyncio.sleep(0.2)
        engine.release.set()
        return list(await asyncio.gather(*tasks, return_exceptions=True))

    return asyncio.run(go())


def test_the_next_batch_goes_in_before_this_ones_words_are_read(fast: Any) -> None:
    from asr.offline.window_batcher import WindowBatcher

    engine = ThreadedEngine(fast)
    batcher = WindowBatcher(engine)
    requests = cuts()
    try:
        results = run(batcher, engine, requests)
    finally:
        batcher.close()
    for windows, got in zip(requests, results, strict=True):
        assert got == [fast.transcribe_windows([w], None)[0] for w in windows]
    launches = [i for i, (what, _) in enumerate(engine.log) if what == "launch"]
    finishes = {k: i for i, (what, k) in enumerate(engine.log) if what == "finish"}
    assert len(launches) >= 4 and sorted(finishes) == list(range(len(launches)))
    # windows were waiting: batch k+1 was launched before batch k was finished, for every k
    assert all(launches[k + 1] < finishes[k] for k in range(len(launches) - 1)), engine.log
    health = asyncio.run(batcher.health())
    assert sum(health["batch_sizes"].values()) == health["batches"] == len(launches)
    assert sum(int(n) * c for n, c in health["batch_sizes"].items()) == sum(len(r) for r in requests)
    assert health["engine_busy_s"] > 0


def test_a_failed_batch_fails_only_its_requests_and_the_batcher_serves_on(fast: Any) -> None:
    from asr.offline.window_batcher import WindowBatcher

    engine = ThreadedEngine(fast, fail=0)
    batcher = WindowBatcher(engine)
    requests = cuts()
    try:
        results = run(batcher, engine, requests)
        failed = [i for i, r in enumerate(results) if isinstance(r, BaseException)]
        assert failed and all(str(results[i]) == "device fault" for i in failed)
        assert len(failed) < len(requests)
        for i, (windows, got) in enumerate(zip(requests, results, strict=True)):
            if i not in failed:
                assert got == [fast.transcribe_windows([w], None)[0] for w in windows]
        again = asyncio.run(batcher.transcribe(requests[0], None))  # the engine thread still serves
        assert again == [fast.transcribe_windows([w], None)[0] for w in requests[0]]
    finally:
        batcher.close()


def test_closing_finishes_the_batches_in_flight_and_fails_the_rest(fast: Any) -> None:
    from asr.offline.window_batcher import WindowBatcher

    engine = ThreadedEngine(fast)
    gate = threading.Event()
    engine.pool.submit(gate.wait, 30)  # the worker is busy until the batcher is closing
    batcher = WindowBatcher(engine)
    requests = cuts()

    async def go() -> list[Any]:
        tasks = [asyncio.create_task(batcher.transcribe(r, None)) for r in requests]
        await asyncio.sleep(0.2)
        engine.release.set()
        while len(engine.log) < 2:  # batches 0 and 1 are launched, the batcher waits on batch 0
            await asyncio.sleep(0.01)
        closing = asyncio.create_task(asyncio.to_thread(batcher.close))
        await asyncio.sleep(0.1)
        gate.set()
        await closing
        return list(await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), 30))

    results = asyncio.run(go())
    assert [what for what, _ in engine.log] == ["launch", "launch", "finish", "finish"], engine.log
    done = [r for r in results if not isinstance(r, BaseException)]
    closed = [r for r in results if isinstance(r, RuntimeError) and "closed" in str(r)]
    assert done and closed and len(done) + len(closed) == len(requests)
