"""One engine, many requests: windows of every request batched together by length.

Each request hands over its windows; a single worker thread owns the engine and builds
each batch by taking the next request in round-robin order (so a 10 s request is not stuck
behind a 3 h one), seeding the batch with that request's oldest window, and filling it with
the pending windows (of any request, same language) closest in length, so padding inside a
batch stays small. An engine that runs fixed shapes (the fast Parakeet backend: one CUDA graph per
length profile, replayed at its whole batch whatever the count) names each window's *length class*
(``length_class``); a batch then holds windows of the seed's class, so it costs one graph
replay, not one per class it touches (with a length mix at 256 requests, closest-length batches
straddling the 10/20/30 s profiles cost 1.7x the replays of length-sorted batches). An engine that
also names its replays' measured cost (``batch_costs``) gets the free rows of the replay filled with
shorter windows, which ride along at no cost. Every window is its own engine input: windows of different requests are never
packed into one input (Whisper, given six short prompts back to back, skipped one that repeated its
neighbour's words). Results go back to each request's loop.

An engine that runs asynchronously (``PipelinedEngine``: the CUDA Parakeet backend) gets the next batch
as soon as the one in flight is encoded, so its encoder runs while the previous batch decodes and the
host builds batches and settles words while the GPU works.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import threading
import time
from collections import Counter, OrderedDict, deque
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from asr.offline.batch_cost import first_take, replay_rows
from asr.offline.results import Word
from asr.offline.window_engine import WindowEngine

# A batch short of full, while files still send windows in parts, waits for more up to one batch's
# mean engine time (a partial batch would cost about as much), within these bounds.
LINGER_MIN_S, LINGER_MAX_S = 0.02, 0.5
MAX_PASSED = 4  # times a window of a class that cannot fill a batch gives way to a fuller class


@dataclass(eq=False)
class _Item:
    request: int
    audio: np.ndarray
    language: str | None
    future: asyncio.Future[list[Word]]
    loop: asyncio.AbstractEventLoop
    length_class: int = 0
    passed: int = 0


@dataclass
class BatchStats:
    batches: int = 0
    windows: int = 0
    inputs: int = 0  # engine inputs (one per window)
    audio_s: float = 0.0
    busy_s: float = 0.0
    sizes: Counter[int] = field(default_factory=Counter)  # batch size -> batches of that size
    lingers: int = 0  # next batches held back for a fuller class while one was in flight (CADENCE_BATCH_LINGER_MS)
    linger_s: float = 0.0  # ... and the seconds they waited


def length_batches(lengths: Sequence[int], max_batch: int) -> list[list[int]]:
    """Indices grouped into batches of similar length (the synchronous policy, for corpora)."""
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    return [order[i:i + max_batch] for i in range(0, len(order), max_batch)]


class WindowBatcher:
    def __init__(self, engine: WindowEngine, max_batch: int | None = None) -> None:
        self.engine = engine
        self.max_batch = max_batch or engine.max_batch
        self.stats = BatchStats()
        self._pending: OrderedDict[int, deque[_Item]] = OrderedDict()
        self._cond = threading.Condition()
        self._ids = itertools.count()
        self._closed = False
        self._length_class = getattr(engine, "length_class", None)
        self._batch_costs = getattr(engine, "batch_costs", None)  # length class -> [(batch, replay s)]
        if os.environ.get("CADENCE_BATCH_COSTS") == "0":  # for A/B runs: every batch as full as it can be
            self._batch_costs = None
        # a replay's free rows carry shorter windows (CADENCE_BATCH_FILL=0 for A/B runs: one class a batch)
        self._fill = os.environ.get("CADENCE_BATCH_FILL") != "0"
        self._streams = 0  # requests still sending parts (stream_parts)
        self._busy_until = 0.0  # when the engine's last batch finished
        # a pipelined engine gets the next batch while it decodes this one (CADENCE_PIPELINE_BATCHES=0 for A/B
        # runs: one batch on the engine at a time)
        self._pipelined = (bool(getattr(engine, "pipelined", False))
                           and os.environ.get("CADENCE_PIPELINE_BATCHES") != "0")
        # With a batch in flight (pipelined), a next batch short of full waits up to this long for its class to fill
        # (CADENCE_BATCH_LINGER_MS, default 0: off). The windows of requests answered meanwhile then join it rather
        # than the batch after; the GPU still has the flight's decoder to run. Not yet measured on a GPU.
        self._linger_in_flight_s = max(0.0, float(os.environ.get("CADENCE_BATCH_LINGER_MS") or 0)) / 1000.0
        self._thread = threading.Thread(target=self._run, name="asr-batcher", daemon=True)
        self._thread.start()

    async def transcribe(self, windows: Sequence[np.ndarray], language: str | None) -> list[list[Word]]:
        """Words of each window (window-relative times), in order."""
        return [words async for words in self.stream(windows, language)]

    async def stream(self, windows: Sequence[np.ndarray], language: str | None) -> AsyncIterator[list[Word]]:
        """Words of each window as soon as it and every window before it are done, in order.

        Leaving early (an error, a cancellation, closing the iterator) withdraws the windows not
        yet taken by the engine, so an abandoned request costs at most the batch in progress.
        """
        if not windows:
            return
        loop = asyncio.get_running_loop()
        request = next(self._ids)
        items = [self._item(request, w, language, loop) for w in windows]
        with self._cond:
            if self._closed:
                raise RuntimeError("the batcher is closed")
            self._pending[request] = deque(items)
            self._cond.notify()
        try:
            for it in items:
                yield await it.future
        finally:
            with self._cond:  # a cancelled request leaves nothing behind
                self._pending.pop(request, None)
            for it in items:
                it.future.cancel()  # results still in flight are dropped, unread errors are not logged

    async def stream_parts(self, parts: AsyncIterator[Sequence[np.ndarray]],
                           language: str | None) -> AsyncIterator[list[Word]]:
        """``stream`` for windows that arrive in parts (a long file planned as it decodes): each part
        joins the queue as it comes, words come back in window order. An error of ``parts`` is raised
        here after the words of the windows before it."""
        loop = asyncio.get_running_loop()
        request = next(self._ids)
        arrived: asyncio.Queue[_Item | BaseException | None] = asyncio.Queue()
        items: list[_Item] = []

        async def feed() -> None:
            with self._cond:
                self._streams += 1
            try:
                async for windows in parts:
                    new = [self._item(request, w, language, loop) for w in windows]
                    with self._cond:
                        if self._closed:
                            raise RuntimeError("the batcher is closed")
                        self._pending.setdefault(request, deque()).extend(new)
                        self._cond.notify()
                    items.extend(new)
                    for it in new:
                        arrived.put_nowait(it)
                arrived.put_nowait(None)
            except Exception as exc:
                arrived.put_nowait(exc)
            finally:
                with self._cond:
                    self._streams -= 1
                    self._cond.notify()

        feeder = asyncio.ensure_future(feed())
        try:
            while (it := await arrived.get()) is not None:
                if isinstance(it, BaseException):
                    raise it
                yield await it.future
        finally:
            feeder.cancel()
            await asyncio.gather(feeder, return_exceptions=True)
            with self._cond:
                self._pending.pop(request, None)
            for it in items:
                it.future.cancel()

    async def health(self) -> dict[str, Any]:
        """What ``/health`` shows of the engine: batches, windows, engine inputs, windows queued, and
        the seconds the engine had work (``engine_busy_s``: against wall time, whether it waited on the
        host), how many batches of each size it ran (``batch_sizes``), and the next batches held back for a fuller
        class while one was in flight (``lingers``, ``linger_s``)."""
        sizes = {str(n): c for n, c in sorted(self.stats.sizes.items())}
        return {"batches": self.stats.batches, "windows": self.stats.windows, "engine_inputs": self.stats.inputs,
                "queued_windows": self.queued_windows, "engine_busy_s": round(self.stats.busy_s, 4),
                "batch_sizes": sizes, "lingers": self.stats.lingers, "linger_s": round(self.stats.linger_s, 4)}

    @property
    def queued_windows(self) -> int:
        """Windows waiting for the engine (not counting the batch in progress)."""
        with self._cond:
            return self._pending_windows()

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify()
        self._thread.join(timeout=30)

    def _linger_s(self) -> float:
        mean = self.stats.busy_s / self.stats.batches if self.stats.batches else 0.0
        return min(LINGER_MAX_S, max(LINGER_MIN_S, mean))

    def _pending_windows(self) -> int:
        return sum(len(q) for q in self._pending.values())

    def _fullest(self) -> int:
        """Pending windows of the (language, length class) that has the most (of all, without classes)."""
        if self._length_class is None:
            return self._pending_windows()
        counts: dict[tuple[str | None, int], int] = {}
        for q in self._pending.values():
            for it in q:
                key = (it.language, it.length_class)
                counts[key] = counts.get(key, 0) + 1
        return max(counts.values(), default=0)

    def _item(self, request: int, audio: np.ndarray, language: str | None,
              loop: asyncio.AbstractEventLoop) -> _Item:
        cls = self._length_class(len(audio)) if self._length_class is not None else 0
        return _Item(request, audio, language, loop.create_future(), loop, cls)

    def _take(self, items: list[_Item]) -> None:
        for it in items:
            q = self._pending.get(it.request)
            if q is not None and it in q:
                q.remove(it)
                if not q:
                    del self._pending[it.request]

    def _next_batch(self) -> list[_Item]:
        """The next batch: the next request's oldest window and the pending windows of its language and
        length class closest in length.

        With length classes, a seed whose class cannot fill a batch while another class holds more
        windows gives way to that class's oldest window, at most ``MAX_PASSED`` times (it keeps its
        place in the round robin meanwhile): full replays first, no request waits long. An engine that
        names its batch sizes' replay costs (``batch_costs``) gets the first batch of the cheapest set
        of replays for the class's pending windows (``batch_cost.first_take``: 20 windows on a 16 and
        a 64 profile go as 16 now and 4 with the next arrivals when two 16 replays cost less than one 64).
        """
        request, queue = next(iter(self._pending.items()))
        seed = queue[0]
        fuller = self._fuller_seed(seed) if seed.passed < MAX_PASSED else None
        if fuller is None:
            self._pending.move_to_end(request)  # round robin: this request goes last next time
        else:
            seed.passed += 1
            seed = fuller
        others = [it for q in self._pending.values() for it in q
                  if it is not seed and it.language == seed.language and it.length_class == seed.length_class]
        target = len(seed.audio)
        others.sort(key=lambda it: abs(len(it.audio) - target))
        costs = self._batch_costs(seed.length_class) if self._batch_costs is not None else None
        take = first_take(1 + len(others), costs, self.max_batch)
        batch = [seed, *others[: take - 1]]
        if costs and self._fill:
            batch += self._filler(batch, min(replay_rows(take, costs), self.max_batch) - take)
        self._take(batch)
        return batch

    def _filler(self, batch: list[_Item], rows: int) -> list[_Item]:
        """Up to ``rows`` pending windows of shorter classes (same language) for a replay's free rows: they
        ride along at no cost, and their own class needs fewer replays later. The longest classes first (a
        window saves the most there), the oldest first within one."""
        if rows <= 0:
            return []
        seed, taken = batch[0], set(map(id, batch))
        shorter = [it for q in self._pending.values() for it in q
                   if it.length_class < seed.length_class and it.language == seed.language and id(it) not in taken]
        shorter.sort(key=lambda it: -it.length_class)  # stable: the round robin's order within a class
        return shorter[:rows]

    def _fuller_seed(self, seed: _Item) -> _Item | None:
        """The oldest window of the (language, class) with the most pending windows, when ``seed``'s
        class cannot fill a batch and that one holds more; else None."""
        if self._length_class is None:
            return None
        counts: dict[tuple[str | None, int], int] = {}
        first: dict[tuple[str | None, int], _Item] = {}
        for q in self._pending.values():
            for it in q:
                key = (it.language, it.length_class)
                counts[key] = counts.get(key, 0) + 1
                first.setdefault(key, it)
        own = counts[(seed.language, seed.length_class)]
        best = max(counts, key=counts.__getitem__)
        return first[best] if own < self.max_batch and counts[best] > own else None

    def _run(self) -> None:
        """The engine's thread. A pipelined engine gets the next batch once the one in flight is encoded (its
        decoder still running), so the GPU never waits for the host to settle words or build a batch, and
        each batch is chosen as late as that allows (from every window that arrived meanwhile)."""
        flight: _Flight | None = None
        while True:
            if flight is not None:
                with contextlib.suppress(Exception):  # a device fault surfaces again in _finish, failing its batch
                    self.engine.wait_encoded(flight.ticket)  # type: ignore[attr-defined]
            with self._cond:
                batch = self._wait_batch() if flight is None else self._batch_now()
                if batch is None and flight is None:  # closed: windows not started fail, none hangs
                    left = [it for q in self._pending.values() for it in q]
                    self._pending.clear()
                    _hand_back(left, [None] * len(left), RuntimeError("the batcher is closed"))
                    return
            launched = self._launch(batch) if batch else None
            if flight is not None:
                self._finish(flight)
            flight = launched
            if flight is not None and not self._pipelined:
                self._finish(flight)
                flight = None

    def _wait_batch(self) -> list[_Item] | None:
        """With the engine idle: the next batch, waiting for windows (None once closed). Holds the lock."""
        while True:
            while not self._pending and not self._closed:
                self._cond.wait()
            if self._closed:
                return None
            if self._streams and self._fullest() < self.max_batch:
                # More windows are on their way (a long file decoding): a fuller batch costs the
                # engine no more than this one would.
                self._cond.wait_for(lambda: self._closed or not self._streams
                                    or self._fullest() >= self.max_batch, timeout=self._linger_s())
                if self._closed or not self._pending:
                    continue
            return self._next_batch()

    def _batch_now(self) -> list[_Item] | None:
        """With a batch in flight: the next one if one is worth starting now (a partial batch waits while
        files still send windows: the flight's end brings more). Holds the lock."""
        if not self._pending or self._closed:
            return None
        short = (self._streams or self._linger_in_flight_s) and self._fullest() < self.max_batch
        if short and self._streams:
            return None
        if short:
            t0 = time.perf_counter()
            self._cond.wait_for(lambda: self._closed or self._fullest() >= self.max_batch,
                                timeout=self._linger_in_flight_s)
            self.stats.lingers += 1
            self.stats.linger_s += time.perf_counter() - t0
            if self._closed or not self._pending:
                return None
        return self._next_batch()

    def _launch(self, batch: list[_Item]) -> _Flight | None:
        t0 = time.perf_counter()
        audio = [it.audio for it in batch]
        try:
            if self._pipelined:
                ticket = self.engine.launch_windows(audio, batch[0].language)  # type: ignore[attr-defined]
            else:
                ticket = self.engine.transcribe_windows(audio, batch[0].language)
        except Exception as exc:  # the engine failed: fail these windows, keep serving
            _hand_back(batch, [None] * len(batch), exc)
            return None
        return _Flight(batch, ticket, t0)

    def _finish(self, flight: _Flight) -> None:
        batch = flight.batch
        try:
            results = (self.engine.finish_windows(flight.ticket) if self._pipelined  # type: ignore[attr-defined]
                       else flight.ticket)
        except Exception as exc:  # the engine failed: fail these windows, keep serving
            _hand_back(batch, [None] * len(batch), exc)
            return
        end = time.perf_counter()
        self.stats.batches += 1
        self.stats.windows += len(batch)
        self.stats.inputs += len(batch)
        self.stats.sizes[len(batch)] += 1
        self.stats.audio_s += sum(len(it.audio) for it in batch) / self.engine.sample_rate
        # wall time with work on the engine: batches in flight together count once
        self.stats.busy_s += end - max(flight.started, self._busy_until)
        self._busy_until = end
        _hand_back(batch, results, None)


@dataclass(eq=False)
class _Flight:
    """A batch handed to the engine: its ticket (pipelined) or its words."""

    batch: list[_Item]
    ticket: Any
    started: float


def _hand_back(batch: list[_Item], results: Sequence[list[Word] | None], exc: BaseException | None) -> None:
    """Settle a batch's futures: one wake-up per event loop, not one per window."""
    by_loop: dict[asyncio.AbstractEventLoop, list[tuple[asyncio.Future[list[Word]], list[Word] | None]]] = {}
    for it, words in zip(batch, results, strict=True):
        by_loop.setdefault(it.loop, []).append((it.future, words))
    for loop, settled in by_loop.items():
        with contextlib.suppress(RuntimeError):  # a closed loop: nobody waits for these
            loop.call_soon_threadsafe(_settle_all, settled, exc)


def _settle_all(settled: list[tuple[asyncio.Future[list[Word]], list[Word] | None]],
                exc: BaseException | None) -> None:
    for future, words in settled:
        _settle(future, words, exc)


def _settle(future: asyncio.Future[list[Word]], words: list[Word] | None, exc: BaseException | None) -> None:
    if future.done():
        return
    if exc is not None:
        future.set_exception(exc)
    else:
        future.set_result(words or [])
