"""``RemoteTTSEngine``: the engine process's TTS, with the in-process engine's ``synthesize_stream`` seam.

    engine = RemoteTTSEngine("/tmp/cadence-engine.sock")
    async for pcm in engine.synthesize_stream("Hello there, how can I help?"):  # one piece per clause
        ...

``tts.service.CadenceTTSService`` takes it as it takes ``KokoroEngine``. Every stream of an event loop
shares one connection (request ids multiplex it). Closing or cancelling a stream before its end (a
barge-in, a caller who hangs up) sends ``cancel``: the engine process withdraws its queued clause. A
connection that breaks (the engine process died or restarts) fails every open stream at once with
``EngineUnavailable``; the next stream reconnects, and fails at once too while nothing listens.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import weakref
from collections.abc import AsyncIterator, Iterator
from typing import Any

from tts.engines import TTSEngineError
from tts.remote.wire import WireError, encode, read_message


class EngineUnavailable(TTSEngineError):
    """The engine process cannot be reached (not started, died, restarting)."""


class _Connection:
    """One socket to the engine process, multiplexing streams and calls by request id."""

    def __init__(self, path: str, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        self.path = path
        self._reader, self._writer = reader, writer
        self._ids = itertools.count(1)
        self._inboxes: dict[int, asyncio.Queue] = {}
        self._calls: dict[int, asyncio.Future] = {}
        self.error: EngineUnavailable | None = None
        self._task = asyncio.create_task(self._read_loop(), name="tts-engine-reader")

    @classmethod
    async def open(cls, path: str, timeout_s: float) -> _Connection:
        try:
            reader, writer = await asyncio.wait_for(asyncio.open_unix_connection(path), timeout_s)
        except (TimeoutError, OSError) as exc:
            raise EngineUnavailable(f"the TTS engine process is not reachable at {path}: {exc!r}") from None
        return cls(path, reader, writer)

    @property
    def usable(self) -> bool:
        return self.error is None and not self._writer.is_closing()

    async def _read_loop(self) -> None:
        try:
            while True:
                header, payload = await read_message(self._reader)
                rid = header.get("id")
                if header["op"] == "reply" and rid in self._calls:
                    fut = self._calls.pop(rid)
                    if not fut.done():
                        fut.set_result(header)
                elif header["op"] == "error" and rid in self._calls:
                    fut = self._calls.pop(rid)
                    if not fut.done():
                        fut.set_exception(TTSEngineError(header.get("message", "engine error")))
                elif (inbox := self._inboxes.get(rid)) is not None:
                    inbox.put_nowait((header, payload))
        except (asyncio.IncompleteReadError, ConnectionError, OSError, WireError) as exc:
            self.error = EngineUnavailable(f"the TTS engine process at {self.path} went away ({exc!r}); "
                                           "it is restarting or down")
        except asyncio.CancelledError:
            self.error = EngineUnavailable("the TTS engine connection was closed")
            raise
        finally:
            self.error = self.error or EngineUnavailable("the TTS engine connection ended")
            self._writer.close()
            for inbox in self._inboxes.values():
                inbox.put_nowait(({"op": "lost"}, b""))
            for fut in self._calls.values():
                if not fut.done():
                    fut.set_exception(self.error)
            self._calls.clear()

    def _send(self, header: dict) -> None:
        if not self.usable:
            raise self.error or EngineUnavailable("the TTS engine connection is closed")
        self._writer.write(encode(header))

    async def call(self, what: str, timeout_s: float = 30.0) -> dict[str, Any]:
        rid = next(self._ids)
        fut = asyncio.get_running_loop().create_future()
        self._calls[rid] = fut
        try:
            self._send({"op": "call", "id": rid, "what": what})
            return await asyncio.wait_for(fut, timeout_s)
        finally:
            self._calls.pop(rid, None)

    async def stream(self, text: str, speed: float | None, seed: int | None) -> AsyncIterator[bytes]:
        rid = next(self._ids)
        inbox: asyncio.Queue = asyncio.Queue()
        self._inboxes[rid] = inbox
        finished = False
        try:
            self._send({"op": "synth", "id": rid, "text": text, "speed": speed, "seed": seed})
            while True:
                header, payload = await inbox.get()
                op = header["op"]
                if op == "audio":
                    yield payload
                    continue
                finished = True
                if op == "end":
                    return
                if op == "error":
                    raise TTSEngineError(f"the TTS engine process failed: {header.get('message')}")
                raise self.error or EngineUnavailable("the TTS engine connection was lost")
        finally:
            self._inboxes.pop(rid, None)
            if not finished and self.usable:
                with contextlib.suppress(Exception):
                    self._send({"op": "cancel", "id": rid})  # withdraw what the engine still has queued

    async def aclose(self) -> None:
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await self._task


class RemoteTTSEngine:
    """A ``tts.engines.TTSEngine`` whose synthesis runs in the engine process at ``path``."""

    def __init__(self, path: str, *, name: str = "kokoro", sample_rate: int = 24000, connect_timeout_s: float = 2.0):
        self.path = str(path)
        self.name = name
        self.sample_rate = sample_rate
        self.connect_timeout_s = connect_timeout_s
        self._connections: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Connection] = (
            weakref.WeakKeyDictionary())

    @classmethod
    def connect(cls, path: str, timeout_s: float = 5.0) -> RemoteTTSEngine:
        """Blocking: ask the engine process its name and rate (its ``hello``); raises ``EngineUnavailable``."""
        info = hello(path, timeout_s)
        return cls(path, name=info["name"], sample_rate=int(info["sample_rate"]))

    async def _connection(self) -> _Connection:
        loop = asyncio.get_running_loop()
        conn = self._connections.get(loop)
        if conn is None or not conn.usable:
            conn = self._connections[loop] = await _Connection.open(self.path, self.connect_timeout_s)
        return conn

    async def synthesize_stream(self, text: str, *, speed: float | None = None,
                                seed: int | None = None) -> AsyncIterator[bytes]:
        """16-bit mono PCM at :attr:`sample_rate`, one piece per clause, as the engine process makes it."""
        conn = await self._connection()
        async with contextlib.aclosing(conn.stream(text, speed, seed)) as pieces:
            async for pcm in pieces:
                yield pcm

    async def call(self, what: str) -> dict[str, Any]:
        """``hello``, ``stats`` (the batcher's counters), ``hold`` / ``release`` (no tick while held)."""
        return await (await self._connection()).call(what)

    def synthesize(self, text: str) -> Iterator[bytes]:
        """The blocking form (warm-ups, tools); from a thread without a running event loop."""
        async def collect() -> list[bytes]:
            conn = await _Connection.open(self.path, self.connect_timeout_s)
            try:
                return [pcm async for pcm in conn.stream(text, None, None)]
            finally:
                await conn.aclose()

        yield from asyncio.run(collect())

    async def aclose(self) -> None:
        """Close this event loop's connection (open streams fail with ``EngineUnavailable``)."""
        conn = self._connections.pop(asyncio.get_running_loop(), None)
        if conn is not None:
            await conn.aclose()


def hello(path: str, timeout_s: float = 5.0) -> dict[str, Any]:
    """Blocking probe: the engine process's ``hello`` (name, sample_rate, pid, memory) or ``EngineUnavailable``."""
    async def ask() -> dict[str, Any]:
        conn = await _Connection.open(path, timeout_s)
        try:
            return await conn.call("hello", timeout_s)
        finally:
            await conn.aclose()

    try:
        return asyncio.run(ask())
    except TimeoutError:
        raise EngineUnavailable(f"the TTS engine process at {path} did not answer within {timeout_s:g} s") from None
