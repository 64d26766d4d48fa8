"""The engine process's side of the host workers: one engine, one batcher, one audio budget.

Each worker connection is served by ``EngineHost.serve_worker``: a submission maps the request's
shared-memory windows and streams each window's words back as the batcher finishes them (so
windows of every worker's requests share batches exactly as the requests of one process do); a
reservation holds seconds of the one server-wide ``AudioBudget`` until the worker cancels it
(granted at once when nobody waits and it fits, else in arrival order). A
worker that goes away has its submissions withdrawn and its reservations released.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Any

from asr.offline.audio_budget import AudioBudget
from asr.offline.ipc import frame, receive, send
from asr.offline.shm_audio import map_windows, unlink
from asr.offline.window_batcher import WindowBatcher

log = logging.getLogger("cadence.transcribe_server")

MAP_IN_THREAD_SAMPLES = 2_000_000  # larger segments (> ~2 min) are mapped off the event loop


class EngineHost:
    def __init__(self, batcher: WindowBatcher, max_audio_held_s: float) -> None:
        self.batcher = batcher
        self.budget = AudioBudget(max_audio_held_s)

    async def stats(self) -> dict[str, Any]:
        return await self.batcher.health()

    async def serve_worker(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                           on_ready: Callable[[int], None]) -> None:
        """Answer one worker until its connection closes."""
        tasks: dict[int, asyncio.Task[None]] = {}
        held: dict[int, float] = {}  # reservations granted at once (no task)
        parts: dict[int, asyncio.Queue[tuple[str, list[int]] | None]] = {}  # requests still sending parts

        def start(rid: int, work: Any) -> None:
            task = asyncio.ensure_future(work)
            tasks[rid] = task
            task.add_done_callback(lambda _: (tasks.pop(rid, None), parts.pop(rid, None)) if tasks.get(rid) is task
                                   else None)

        try:
            while True:
                try:
                    msg = await receive(reader)
                except (asyncio.IncompleteReadError, ConnectionError):
                    return
                kind = msg[0]
                if kind == "submit":
                    start(msg[1], self._submission(writer, *msg[1:]))
                elif kind == "part":  # a request whose windows arrive in parts: the first one starts it
                    if msg[1] not in parts:
                        parts[msg[1]] = asyncio.Queue()
                        start(msg[1], self._parts(writer, msg[1], parts[msg[1]], msg[4]))
                    parts[msg[1]].put_nowait((msg[2], msg[3]))
                elif kind == "close":
                    queue = parts.pop(msg[1], None)
                    if queue is not None:
                        queue.put_nowait(None)
                    else:  # no part at all: nothing to transcribe
                        send(writer, ("end", msg[1]))
                elif kind == "reserve":
                    if self.budget.try_take(msg[2]):
                        held[msg[1]] = msg[2]
                        send(writer, ("granted", msg[1]))
                    else:  # wait in line
                        start(msg[1], self._reservation(writer, msg[1], msg[2]))
                elif kind == "cancel":
                    task = tasks.pop(msg[1], None)
                    parts.pop(msg[1], None)
                    if task is not None:
                        task.cancel()
                    seconds = held.pop(msg[1], None)
                    if seconds is not None:
                        self.budget.give_back(seconds)
                elif kind == "stats":
                    send(writer, ("stats", msg[1], await self.stats()))
                elif kind == "ready":
                    on_ready(msg[1])
                else:
                    log.error("unknown message from a host worker: %r", kind)
        finally:
            for seconds in held.values():
                self.budget.give_back(seconds)
            for task in tasks.values():
                task.cancel()
            await asyncio.gather(*tasks.values(), return_exceptions=True)
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()

    async def _reservation(self, writer: asyncio.StreamWriter, rid: int, seconds: float) -> None:
        async with self.budget.reserve(seconds):
            send(writer, ("granted", rid))
            await asyncio.Event().wait()  # held until the worker cancels it (or goes away)

    async def _parts(self, writer: asyncio.StreamWriter, rid: int, queue: asyncio.Queue[Any],
                     language: str | None) -> None:
        async def windows() -> Any:
            while (part := await queue.get()) is not None:
                segment, lengths = part
                if sum(lengths) > MAP_IN_THREAD_SAMPLES:
                    yield await asyncio.to_thread(map_windows, segment, lengths)
                else:
                    yield map_windows(segment, lengths)

        try:
            async for words in self.batcher.stream_parts(windows(), language):
                send(writer, ("words", rid, [(w.start, w.end, w.text) for w in words]))
            send(writer, ("end", rid))
        except asyncio.CancelledError:
            while not queue.empty():  # segments never mapped: remove them
                part = queue.get_nowait()
                if part is not None:
                    unlink(part[0])
            raise
        except Exception as exc:
            log.exception("transcription failed in the engine process")
            send(writer, ("error", rid, f"{type(exc).__name__}: {exc}"))

    async def _submission(self, writer: asyncio.StreamWriter, rid: int, segment: str, lengths: list[int],
                          language: str | None) -> None:
        try:
            if sum(lengths) > MAP_IN_THREAD_SAMPLES:
                windows = await asyncio.to_thread(map_windows, segment, lengths)
            else:
                windows = map_windows(segment, lengths)
            last = len(windows) - 1
            k = 0
            async for words in self.batcher.stream(windows, language):
                message = ("words", rid, [(w.start, w.end, w.text) for w in words])
                if k < last:
                    send(writer, message)
                k += 1
            del windows  # the mapping goes with the last view (the batch in progress may still hold one)
            if not writer.is_closing():
                writer.write(frame(message) + frame(("end", rid)))  # one write for the last window and the end
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.exception("transcription failed in the engine process")
            send(writer, ("error", rid, f"{type(exc).__name__}: {exc}"))
