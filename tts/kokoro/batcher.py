"""One synthesis scheduler per model: every caller's clauses share GPU calls.

Requests are queued from any thread or event loop; one worker thread repeatedly takes everything
pending (earliest deadline first, up to ``max_batch`` utterances) and runs ``KokoroModel.synthesize``
on it, one batched forward per tick. With a first-clause lane (``first_model``: the same weights under
graphs of their own, ``KokoroModel.lane_view``) a second thread on a high-priority CUDA stream takes
only streams' first clauses, so a caller waiting for the first audio does not wait for the main lane's
tick of later clauses (runs 66-71: 130-225 ms a tick at 256 callers) before its own starts; while that
lane is busy, the main lane takes first clauses too, as it does without one. Results go back through the
caller's future: an asyncio future resolved on its own loop (:meth:`SynthesisBatcher.synthesize`) or a blocking wait
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
FIRST_LANE_PRIORITY = -5  # the first-clause lane's CUDA stream priority (out-of-range values map to the highest)


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
    first_lane_ticks: int = 0  # ticks of the first-clause lane (included in ticks)
    first_lane_utterances: int = 0


@dataclass
class _Lane:
    """A worker thread's model (its graphs) and what it may take."""

    name: str
    model: KokoroModel
    max_batch: int
    firsts_only: bool  # the first-clause lane: streams' first clauses only
    priority: int  # its CUDA stream's priority (lower is sooner)
    max_ids: int = 0  # the first-clause lane: the longest clause (phoneme ids) its graphs hold; 0: any
    in_flight: int = 0
    started: float = 0.0  # monotonic seconds when its unfinished tick began (0: idle)

    def holds(self, ticket: Ticket) -> bool:
        """Whether this lane serves ``ticket``."""
        if not self.firsts_only:
            return True
        return ticket.first and (not self.max_ids or len(ticket.utterance.ids) <= self.max_ids)


class SynthesisBatcher:
    def __init__(self, model: KokoroModel, max_batch: int = 64, max_batch_phonemes: int = 0, frame_bucket: int = 8,
                 urgent_s: float | None = 0.5, name: str = "kokoro-batcher", first_model: KokoroModel | None = None,
                 first_max_batch: int = 16, first_max_ids: int = 0, work_ahead_phonemes: int = 0):
        self.model = model
        self.max_batch = max(1, int(max_batch))
        # Requests due within urgent_s go first, without the ones that can wait and are longer: a first clause
        # is not padded to (and delayed by) the long later clauses of other streams; waiting ones no longer
        # than the longest urgent one ride along (no padding, a few ms of GPU each: run 32 ran batches of 4-7
        # with 20-38 waiting, ~90 ms a tick). None: all pending, EDF.
        self.urgent_s = urgent_s
        self.max_batch_phonemes = int(max_batch_phonemes)
        # A tick with nothing due within urgent_s (the GPU working ahead on later clauses) takes at most this many
        # phoneme ids (0: no cap), so a first clause that arrives meanwhile waits for a short tick, not for up to
        # max_batch long clauses (runs 71-73: 130-225 ms ticks, first-clause wait p50 157-240 ms at 256 callers).
        self.work_ahead_phonemes = int(work_ahead_phonemes)
        self.frame_bucket = frame_bucket
        self.stats = BatcherStats()
        self._cond = threading.Condition()
        self._queue: list[Ticket] = []
        self._lanes = [_Lane("main", model, self.max_batch, firsts_only=False, priority=0)]
        if first_model is not None:
            self._lanes.append(_Lane("first", first_model, max(1, int(first_max_batch)), firsts_only=True,
                                     priority=FIRST_LANE_PRIORITY, max_ids=int(first_max_ids)))
        self._holds = 0
        # first clauses' queue waits and each tick's time (s), for the engine's load line (``drain_timings``)
        self._first_waits: deque[float] = deque(maxlen=TIMINGS_KEPT)
        self._tick_s: deque[float] = deque(maxlen=TIMINGS_KEPT)
        self._closed = False
        self._threads = [threading.Thread(target=self._loop, args=(lane,), name=f"{name}-{lane.name}", daemon=True)
                         for lane in self._lanes]
        for thread in self._threads:
            thread.start()

    @property
    def first_lane(self) -> bool:
        """Whether a lane of its own serves streams' first clauses."""
        return len(self._lanes) > 1

    # ------------------------------------------------------------------ queue
    def submit(self, utterance: Utterance, done: Done, deadline: float | None = None) -> Ticket:
        """Queue ``utterance``; ``done(audio, error)`` is called from the worker thread."""
        now = time.monotonic()
        ticket = Ticket(now if deadline is None else deadline, next(_ids), utterance, done, queued_at=now)
        with self._cond:
            if self._closed:
                raise RuntimeError("the synthesis batcher is closed")
            self._queue.append(ticket)
            self._cond.notify_all()
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
            return sum(lane.in_flight for lane in self._lanes)

    def stalled_s(self) -> float:
        """How long the oldest unfinished tick has run, in seconds (0: no tick running): the engine's watchdog
        (``agent.engine_watchdog``) stops a process whose GPU stopped finishing work."""
        with self._cond:
            started = [lane.started for lane in self._lanes if lane.started]
        return time.monotonic() - min(started) if started else 0.0

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
                self._cond.notify_all()

    def close(self, timeout: float = 5.0) -> None:
        with self._cond:
            self._closed = True
            queued, self._queue = self._queue, []
            self._cond.notify_all()
        for ticket in queued:
            ticket.done(None, RuntimeError("the synthesis batcher closed"))
        for thread in self._threads:
            if thread is not threading.current_thread():
                thread.join(timeout)

    # ------------------------------------------------------------------ worker
    def _due_soon(self, ticket: Ticket) -> bool:
        """Due within ``urgent_s`` (a first clause, or a later one its listener is about to need)."""
        return ticket.first or (self.urgent_s is not None and ticket.deadline <= time.monotonic() + self.urgent_s)

    def _free_first_lane(self) -> _Lane | None:
        """The first-clause lane while it has no tick running; None without one or while it is busy."""
        lane = self._lanes[-1]
        return lane if lane.firsts_only and not lane.in_flight else None

    def _has_work(self, lane: _Lane) -> bool:
        """Whether ``lane`` would take something now: ``_candidates`` is not empty (without sorting the queue, on
        every wake of every lane; with one lane, whether anything is queued)."""
        if lane.firsts_only:
            return any(lane.holds(t) for t in self._queue)
        free = self._free_first_lane()
        return any(not free.holds(t) for t in self._queue) if free is not None else bool(self._queue)

    def _candidates(self, lane: _Lane) -> list[Ticket]:
        """What ``lane`` would take now, in order (the queue sorted by deadline): the first-clause lane takes first
        clauses only; the main lane leaves them to it while it is free, and otherwise serves the queue as a lone lane
        does (requests due within ``urgent_s`` first, with the waiting ones no longer than the longest of them)."""
        self._queue.sort()
        if lane.firsts_only:
            return [t for t in self._queue if lane.holds(t)]
        queue = self._queue
        free = self._free_first_lane()
        if free is not None:
            queue = [t for t in queue if not free.holds(t)]
        if self.urgent_s is not None:
            due = time.monotonic() + self.urgent_s
            urgent = [t for t in queue if t.deadline <= due]  # a prefix: the queue is deadline-sorted
            if urgent:
                longest = max(len(t.utterance.ids) for t in urgent)
                return urgent + [t for t in queue[len(urgent):] if len(t.utterance.ids) <= longest]
        return queue

    def _take(self, lane: _Lane) -> list[Ticket]:
        candidates = self._candidates(lane)
        cap = self.max_batch_phonemes
        if self.work_ahead_phonemes and candidates and not self._due_soon(candidates[0]):  # nobody is waiting yet
            cap = min(cap, self.work_ahead_phonemes) if cap else self.work_ahead_phonemes
        batch, ids = [], 0
        for ticket in candidates:
            n = len(ticket.utterance.ids)
            if batch and (len(batch) >= lane.max_batch or (cap and ids + n > cap)):
                break
            batch.append(ticket)
            ids += n
        taken = {id(t) for t in batch}
        self._queue[:] = [t for t in self._queue if id(t) not in taken]
        return batch

    def _loop(self, lane: _Lane) -> None:
        # Its own CUDA stream: on the legacy default stream every batch would also serialize with what other
        # threads of the process launch there (the engine process's Parakeet ticks); the first-clause lane's at a
        # higher priority, so its kernels are scheduled ahead of the main lane's. None on the CPU: no-op.
        dev = lane.model.device
        stream = torch.cuda.Stream(dev, priority=lane.priority) if dev.type == "cuda" else None
        with torch.cuda.stream(stream):
            self._serve(lane)

    def _synthesize(self, batch: list, model: KokoroModel | None = None) -> list[tuple[Any, BaseException | None]]:
        """(audio, error) per ticket. A batch the device has no memory for is split in halves and each half tried
        again (run 57: an eager batch of 64 past the captured buckets ran out of Kokoro's share at the start of a
        128-caller level and failed all 64 callers' clauses); any other failure fails this tick's callers only."""
        model = model or self.model
        try:
            result = model.synthesize([t.utterance for t in batch], frame_bucket=self.frame_bucket)
        except torch.OutOfMemoryError as exc:
            if len(batch) == 1:
                logger.error(f"kokoro: one clause does not fit the device's memory: {exc}")
                return [(None, exc)]
            if model.device.type == "cuda":
                torch.cuda.empty_cache()
            with self._cond:
                self.stats.oom_splits += 1
            half = len(batch) // 2
            logger.warning(f"kokoro: a batch of {len(batch)} ran out of device memory; split in {half} + "
                           f"{len(batch) - half}")
            return self._synthesize(batch[:half], model) + self._synthesize(batch[half:], model)
        except Exception as exc:  # fail this tick's callers, keep serving the others
            logger.exception(f"kokoro batch of {len(batch)} failed")
            return [(None, exc)] * len(batch)
        audio_s = sum(len(a) for a in result.audio) / model.sample_rate
        with self._cond:
            self.stats.audio_s += audio_s
        return [(audio, None) for audio in result.audio]

    def _serve(self, lane: _Lane) -> None:
        while True:
            with self._cond:
                while not self._closed and (self._holds or not self._has_work(lane)):
                    self._cond.wait()
                if self._closed:
                    return
                batch = self._take(lane)
                lane.in_flight = len(batch)
                taken = lane.started = time.monotonic()
                waits = [taken - t.queued_at for t in batch if t.first]
                self._cond.notify_all()  # the other lane's share of the queue may have changed
            start = time.perf_counter()
            outcomes = self._synthesize(batch, lane.model)
            elapsed = time.perf_counter() - start
            with self._cond:
                stats = self.stats
                stats.busy_s += elapsed
                # the tick's first-clause waits are filed with its time, when it ends: a load line that drains
                # the timings while a long tick runs (CI: a 309 ms tick, 0.2 s lines) does not drop its waits
                self._tick_s.append(elapsed)
                self._first_waits.extend(waits)
                stats.ticks += 1
                stats.utterances += len(batch)
                if lane.firsts_only:
                    stats.first_lane_ticks += 1
                    stats.first_lane_utterances += len(batch)
                stats.last_batch = len(batch)
                stats.max_batch = max(stats.max_batch, len(batch))
                stats.batch_sizes[len(batch)] += 1
                lane.in_flight = 0
                lane.started = 0.0
                self._cond.notify_all()
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
