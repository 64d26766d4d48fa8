"""A host worker's view of the engine process: the batcher, the audio budget and the engine's facts.

``RemoteBatcher`` has the ``WindowBatcher`` interface the transcriber uses (``stream``,
``transcribe``, ``health``, ``close``): a request's windows go to the engine process through a
shared-memory segment and one message, and each window's words come back as the engine finishes
them. Leaving early cancels the submission there (its queued windows are withdrawn) and removes
the segment if the engine has not taken it. ``RemoteBudget`` is the server-wide ``AudioBudget``
held by the engine process, with the same ``reserve`` context manager.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np

from asr.offline.ipc import receive, send
from asr.offline.plan import PlanOptions
from asr.offline.results import Word
from asr.offline.shm_audio import SegmentWriter, unlink

WRITE_IN_THREAD_SAMPLES = 2_000_000  # larger requests (> ~2 min) are written off the event loop


@dataclass(frozen=True)
class EngineInfo:
    """What the host side needs to know of the engine (``WindowEngine`` without ``transcribe_windows``)."""

    name: str
    sample_rate: int
    plan: PlanOptions
    max_batch: int
    languages: frozenset[str] | None

    @classmethod
    def of(cls, engine: Any) -> EngineInfo:
        return cls(engine.name, engine.sample_rate, engine.plan, engine.max_batch, engine.languages)


class EngineGone(ConnectionError):
    """The engine process closed the connection (it is shutting down)."""


class EngineLink:
    """One worker's connection to the engine process: requests out, answers routed by request id."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                 on_lost: Callable[[], None] | None = None) -> None:
        self.reader, self.writer = reader, writer
        self.on_lost = on_lost
        self.closed = False
        self._ids = itertools.count()
        self._inbox: dict[int, asyncio.Queue[Any]] = {}
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.ensure_future(self._read())

    def open(self) -> tuple[int, asyncio.Queue[Any]]:
        if self.closed:
            raise EngineGone("the engine process is gone")
        rid = next(self._ids)
        self._inbox[rid] = queue = asyncio.Queue()
        return rid, queue

    def drop(self, rid: int) -> None:
        self._inbox.pop(rid, None)

    def send(self, message: Any) -> None:
        send(self.writer, message)

    async def _read(self) -> None:
        try:
            while True:
                msg = await receive(self.reader)
                queue = self._inbox.get(msg[1])
                if queue is not None:  # answers to a request already given up are dropped
                    queue.put_nowait(msg)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            self.closed = True
            for queue in self._inbox.values():
                queue.put_nowait(("gone", None))
            if self.on_lost is not None:
                self.on_lost()

    async def close(self) -> None:
        self.writer.close()
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)


async def _answer(queue: asyncio.Queue[Any]) -> Any:
    msg = await queue.get()
    if msg[0] == "gone":
        raise EngineGone("the engine process closed the connection")
    if msg[0] == "error":
        raise RuntimeError(f"the engine failed: {msg[2]}")
    return msg


class RemoteBatcher:
    def __init__(self, link: EngineLink, segments: SegmentWriter) -> None:
        self.link = link
        self.segments = segments

    async def transcribe(self, windows: Sequence[np.ndarray], language: str | None) -> list[list[Word]]:
        return [words async for words in self.stream(windows, language)]

    async def stream(self, windows: Sequence[np.ndarray], language: str | None) -> AsyncIterator[list[Word]]:
        """Words of each window, in order, as the engine process finishes them."""
        if not windows:
            return
        rid, queue = self.link.open()
        segment = None
        done = False
        try:
            if sum(len(w) for w in windows) > WRITE_IN_THREAD_SAMPLES:
                segment, lengths = await asyncio.to_thread(self.segments.write, windows)
            else:
                segment, lengths = self.segments.write(windows)
            self.link.send(("submit", rid, segment, lengths, language))
            for _ in windows:
                msg = await _answer(queue)
                yield [Word(s, e, t) for s, e, t in msg[2]]
            await _answer(queue)  # "end": the engine has let go of the segment
            done = True
        finally:
            self.link.drop(rid)
            if not done:
                if not self.link.closed:
                    self.link.send(("cancel", rid))
                if segment is not None:
                    unlink(segment)  # not taken yet (a taken one is already unlinked)

    async def stream_parts(self, parts: AsyncIterator[Sequence[np.ndarray]],
                           language: str | None) -> AsyncIterator[list[Word]]:
        """``stream`` for windows that arrive in parts: one segment and one ``part`` message per part
        (the engine queues its windows at once), ``close`` after the last; words in window order."""
        rid, queue = self.link.open()
        segments: list[str] = []
        sent = 0

        async def feed() -> None:
            nonlocal sent
            async for windows in parts:
                if not windows:
                    continue
                if sum(len(w) for w in windows) > WRITE_IN_THREAD_SAMPLES:
                    segment, lengths = await asyncio.to_thread(self.segments.write, windows)
                else:
                    segment, lengths = self.segments.write(windows)
                segments.append(segment)
                self.link.send(("part", rid, segment, lengths, language))
                sent += len(windows)
            self.link.send(("close", rid))

        feeder = asyncio.ensure_future(feed())
        wait: asyncio.Future[Any] | None = None
        done = False
        try:
            while True:
                if feeder.done() and not feeder.cancelled() and feeder.exception() is not None:
                    feeder.result()  # the parts failed (a decode error): raise it
                if wait is None:
                    wait = asyncio.ensure_future(_answer(queue))
                await asyncio.wait({wait} if feeder.done() else {wait, feeder}, return_when=asyncio.FIRST_COMPLETED)
                if not wait.done():
                    continue
                got, wait = wait.result(), None
                if got[0] == "end":
                    break
                yield [Word(s, e, t) for s, e, t in got[2]]
            feeder.result()
            done = True
        finally:
            for task in (wait, feeder):
                if task is not None and not task.done():
                    task.cancel()
                    await asyncio.gather(task, return_exceptions=True)
            self.link.drop(rid)
            if not done:
                if not self.link.closed:
                    self.link.send(("cancel", rid))
                for segment in segments:
                    unlink(segment)  # those not taken yet (a taken one is already unlinked)

    async def health(self) -> dict[str, Any]:
        rid, queue = self.link.open()
        try:
            self.link.send(("stats", rid))
            return (await _answer(queue))[2]
        finally:
            self.link.drop(rid)

    def close(self) -> None:
        pass  # the worker's connection closes with the worker


class RemoteBudget:
    """The server-wide audio budget, held by the engine process."""

    def __init__(self, link: EngineLink) -> None:
        self.link = link

    @asynccontextmanager
    async def reserve(self, seconds: float) -> AsyncIterator[None]:
        rid, queue = self.link.open()
        try:
            self.link.send(("reserve", rid, seconds))
            await _answer(queue)
            yield
        finally:
            self.link.drop(rid)
            if not self.link.closed:
                self.link.send(("cancel", rid))
