"""One synthesis scheduler per model: every caller's clauses share GPU calls.

Requests are queued from any thread or event loop; one worker thread repeatedly takes everything
pending (earliest deadline first, up to ``max_batch`` utterances) and runs ``KokoroModel.synthesize``
on it, one batched forward per tick. Results go back through the caller's future: an asyncio future
resolved on its own loop (:meth:`SynthesisBatcher.synthesize`) or a blocking wait
(:meth:`SynthesisBatcher.synthesize_blocking`). A cancelled asyncio wait takes its request out of
the queue; one already on the GPU finishes and its audio is dropped. No thread pool is involved, so
hundreds of concurrent callers do not queue behind ``asyncio.to_thread``'s workers.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import itertools
import logging
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from tts.kokoro.model import KokoroModel, Utterance

Done = Callable[[np.ndarray | None, BaseException | None], None]
_ids = itertools.count()
logger = logging.getLogger(__name__)
FIRST_CLAUSE_SLACK_S = 0.005  # a ticket due within this of its queueing is a first clause
TIMINGS_KEPT = 8192  # queue waits and tick times kept between two drain_timings calls


@dataclass(order=True)
class Ticket:
    """A queued utterance; ``deadline`` (monotonic seconds) orders the queue."""

    deadline: float
    seq: int
    utterance: Utterance = field(compare=False)
    done: Done = field(compare=False)
    queued_at: float = field(default=0.0, compare=False)  # monotonic seconds at submit

    @property
    def first(self) -> bool:
        """Due at once when queued: a stream's first clause (its caller is waiting for the first audio)."""
        return self.deadline <= self.queued_at + FIRST_CLAUSE_SLACK_S


@dataclass
class BatcherStats:
    ticks: int = 0
    utterances: int = 0
    cancelled: int = 0  # taken out of the queue before reaching the GPU
    busy_s: float = 0.0
    audio_s: float = 0.0
    last_batch: int = 0
    max_batch: int = 0
    batch_sizes: Counter = field(default_factory=Counter)
    oom_splits: int = 0  # batches split in halves because the device ran out of memory


class SynthesisBatcher:
    def __init__(self, model: KokoroModel, max_batch: int = 64, max_batch_phonemes: int = 0, frame_bucket: int = 8,
                 urgent_s: float | None = 0.5, name: str = "kokoro-batcher"):
        self.model = model
        self.max_batch = max(1, int(max_batch))
        # Requests due within urgent_s go first, without the ones that can wait and are longer: a first clause
        # is not padded to (and delayed by) the long later clauses of other streams; waiting ones no longer
        # than the longest urgent one ride along (no padding, a few ms of GPU each: run 32 ran batches of 4-7
        # with 20-38 waiting, ~90 ms a tick). None: all pending, EDF.
        self.urgent_s = urgent_s
        self.max_batch_phonemes = int(max_batch_phonemes)
        self.frame_bucket = frame_bucket
        self.stats = BatcherStats()
        self._cond = threading.Condition()
        self._queue: list[Ticket] = []
        self._in_flight = 0
        self._holds = 0
        # first clauses' queue waits and each tick's time (s), for the engine's load line (``drain_timings``)
        self._first_waits: deque[float] = deque(maxlen=TIMINGS_KEPT)
        self._tick_s: deque[float] = deque(maxlen=TIMINGS_KEPT)
        self._closed = False
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)
        self._thread.start()

    # ------------------------------------------------------------------ queue
    def submit(self, utterance: Utterance, done: Done, deadline: float | None = None) -> Ticket:
        """Queue ``utterance``; ``done(audio, error)`` is called from the worker thread."""
        now = time.monotonic()
        ticket = Ticket(now if deadline is None else deadline, next(_ids), utterance, done, queued_at=now)
        with self._cond:
            if self._closed:
                raise RuntimeError("the synthesis batcher is closed")
            self._queue.append(ticket)
            self._cond.notify()
        return ticket

    def cancel(self, ticket: Ticket) -> bool:
        """Take ``ticket`` out of the queue; False if it is already on the GPU or done."""
        with self._cond:
            try:
                self._queue.remove(ticket)
            except ValueError:
                return False
            self.stats.cancelled += 1
            return True

    @property
    def pending(self) -> int:
        """Utterances queued and not yet taken by a tick."""
        with self._cond:
            return len(self._queue)

    def drain_timings(self) -> tuple[list[float], list[float]]:
        """The first clauses' waits in the queue (submit -> taken by a tick) and the ticks' times, in seconds, since
        the last call: what an urgent clause pays for the batch ahead of it, and what that batch costs."""
        with self._cond:
            waits, ticks = list(self._first_waits), list(self._tick_s)
            self._first_waits.clear()
            self._tick_s.clear()
        return waits, ticks

    @property
    def in_flight(self) -> int:
        with self._cond:
            return self._in_flight

    def enqueue(self, utterance: Utterance, deadline: float | None = None) -> Request:
        """Queue ``utterance`` for a future of the running event loop (resolved on that loop)."""
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[np.ndarray] = loop.create_future()

        def done(audio: np.ndarray | None, error: BaseException | None) -> None:
            with contextlib.suppress(RuntimeError):  # the loop has closed: nobody is waiting
                loop.call_soon_threadsafe(_resolve, fut, audio, error)

        return Request(self, self.submit(utterance, done, deadline), fut)

    def submit_future(self, utterance: Utterance, deadline: float | None = None) -> Request:
        """Queue ``utterance`` for a ``concurrent.futures.Future`` (for callers outside an event loop)."""
        fut: concurrent.futures.Future[np.ndarray] = concurrent.futures.Future()

        def done(audio: np.ndarray | None, error: BaseException | None) -> None:
            if fut.set_running_or_notify_cancel():
                fut.set_exception(error) if error is not None else fut.set_result(audio)

        return Request(self, self.submit(utterance, done, deadline), fut)

    async def synthesize(self, utterance: Utterance, deadline: float | None = None) -> np.ndarray:
        """Audio of one utterance, awaited on the running loop; cancelling the wait dequeues it."""
        request = self.enqueue(utterance, deadline)
        try:
            return await request.future  # type: ignore[misc]
        finally:
            request.cancel()

    @contextlib.contextmanager
    def held(self) -> Iterator[None]:
        """No tick starts inside this block (requests queue up); for tests and ordered warm-ups."""
        with self._cond:
            self._holds += 1
        try:
            yield
        finally:
            with self._cond:
                self._holds -= 1
                self._cond.notify()

    def close(self, timeout: float = 5.0) -> None:
        with self._cond:
            self._closed = True
            queued, self._queue = self._queue, []
            self._cond.notify()
        for ticket in queued:
            ticket.done(None, RuntimeError("the synthesis batcher closed"))
        if self._thread is not threading.current_thread():
            self._thread.join(timeout)

    # ------------------------------------------------------------------ worker
    def _take(self) -> list[Ticket]:
        self._queue.sort()
        candidates = self._queue
        if self.urgent_s is not None:
            due = time.monotonic() + self.urgent_s
            urgent = [t for t in self._queue if t.deadline <= due]  # a prefix: the queue is deadline-sorted
            if urgent:
                longest = max(len(t.utterance.ids) for t in urgent)
                riders = [t for t in self._queue[len(urgent):] if len(t.utterance.ids) <= longest]
                candidates = urgent + riders
        batch, ids = [], 0
        for ticket in candidates:
            n = len(ticket.utterance.ids)
            if batch and (len(batch) >= self.max_batch or (self.max_batch_phonemes and ids + n > self.max_batch_phonemes)):
                break
            batch.append(ticket)
            ids += n
        taken = {id(t) for t in batch}
        self._queue[:] = [t for t in self._queue if id(t) not in taken]
        return batch

    def _loop(self) -> None:
        # Its own CUDA stream: on the legacy default stream every batch would also serialize with what other
        # threads of the process launch there (the engine process's Parakeet ticks). None on the CPU: no-op.
        dev = self.model.device
        with torch.cuda.stream(torch.cuda.Stream(dev) if dev.type == "cuda" else None):
            self._serve()

    def _synthesize(self, batch: list) -> list[tuple[Any, BaseException | None]]:
        """(audio, error) per ticket. A batch the device has no memory for is split in halves and each half tried
        again (run 57: an eager batch of 64 past the captured buckets ran out of Kokoro's share at the start of a
        128-caller level and failed all 64 callers' clauses); any other failure fails this tick's callers only."""
        try:
            result = self.model.synthesize([t.utterance for t in batch], frame_bucket=self.frame_bucket)
        except torch.OutOfMemoryError as exc:
            if len(batch) == 1:
                logger.error(f"kokoro: one clause does not fit the device's memory: {exc}")
                return [(None, exc)]
            if self.model.device.type == "cuda":
                torch.cuda.empty_cache()
            self.stats.oom_splits += 1
            half = len(batch) // 2
            logger.warning(f"kokoro: a batch of {len(batch)} ran out of device memory; split in {half} + "
                           f"{len(batch) - half}")
            return self._synthesize(batch[:half]) + self._synthesize(batch[half:])
        except Exception as exc:  # fail this tick's callers, keep serving the others
            logger.exception(f"kokoro batch of {len(batch)} failed")
            return [(None, exc)] * len(batch)
        self.stats.audio_s += sum(len(a) for a in result.audio) / self.model.sample_rate
        return [(audio, None) for audio in result.audio]

    def _serve(self) -> None:
        while True:
            with self._cond:
                while not self._closed and (not self._queue or self._holds):
                    self._cond.wait()
                if self._closed:
                    return
                batch = self._take()
                self._in_flight = len(batch)
                taken = time.monotonic()
                self._first_waits.extend(taken - t.queued_at for t in batch if t.first)
            start = time.perf_counter()
            outcomes = self._synthesize(batch)
            elapsed = time.perf_counter() - start
            self.stats.busy_s += elapsed
            with self._cond:
                self._tick_s.append(elapsed)
            self.stats.ticks += 1
            self.stats.utterances += len(batch)
            self.stats.last_batch = len(batch)
            self.stats.max_batch = max(self.stats.max_batch, len(batch))
            self.stats.batch_sizes[len(batch)] += 1
            with self._cond:
                self._in_flight = 0
            for ticket, (audio, error) in zip(batch, outcomes, strict=True):
                try:
                    ticket.done(audio, error)
                except Exception:  # a caller's callback must not stop the worker
                    logger.exception("kokoro result callback failed")


@dataclass
class Request:
    """A queued utterance and the future its audio arrives on; ``cancel`` is safe at any time."""

    batcher: SynthesisBatcher
    ticket: Ticket
    future: asyncio.Future | concurrent.futures.Future

    def cancel(self) -> None:
        """Dequeue if still queued and cancel the future (no-op once the audio has arrived)."""
        if self.future.done() and not self.future.cancelled():
            return
        self.batcher.cancel(self.ticket)
        self.future.cancel()


def _resolve(fut: asyncio.Future, audio: np.ndarray | None, error: BaseException | None) -> None:
    if fut.done():
        return
    if error is not None:
        fut.set_exception(error)
    else:
        fut.set_result(audio)
