"""``RemoteTTSEngine``: the engine process's TTS, with the in-process engine's ``synthesize_stream`` seam.

    engine = RemoteTTSEngine("/tmp/cadence-engine-x/engine.sock")
    async for pcm in engine.synthesize_stream("Hello there, how can I help?"):  # one piece per clause
        ...

``tts.service.CadenceTTSService`` takes it as it takes ``KokoroEngine``. Every stream of an event loop
shares one connection (``transports.engine_link``; request ids multiplex it). Given several engine
processes (``"a.sock,b.sock"``: ``server.tts_engines``), each stream goes to the one this process has the
fewest open streams on (ties in turn), and to the next one when that one cannot be reached. Closing or cancelling a
stream before its end (a barge-in, a caller who hangs up) sends ``cancel``: the engine process withdraws
its queued clause. A connection that breaks (the engine process died or restarts) fails every open
stream at once with ``EngineUnavailable``; the next stream reconnects, and fails at once too while
nothing listens.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterator, Sequence
from typing import Any

from transports.engine_link import Connection, EngineUnavailable, Links, hello
from tts.engines import TTSEngineError

__all__ = ["EngineUnavailable", "RemoteTTSEngine", "hello", "stream"]


async def stream(conn: Connection, text: str, speed: float | None, seed: int | None) -> AsyncIterator[bytes]:
    """One ``synth`` on ``conn``: its PCM pieces; closed early, it sends ``cancel``."""
    rid = conn.next_id()
    finished = False
    with conn.inbox(rid) as inbox:
        try:
            conn.send({"op": "synth", "id": rid, "text": text, "speed": speed, "seed": seed})
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
                raise conn.error or EngineUnavailable("the engine connection was lost")
        finally:
            if not finished and conn.usable:
                with contextlib.suppress(Exception):
                    conn.send({"op": "cancel", "id": rid})  # withdraw what the engine still has queued


class RemoteTTSEngine:
    """A ``tts.engines.TTSEngine`` whose synthesis runs in the engine process at ``path`` (or spread over
    several: a comma-separated list or a sequence of socket paths)."""

    def __init__(self, path: str | Sequence[str], *, name: str = "kokoro", sample_rate: int = 24000,
                 connect_timeout_s: float = 2.0):
        self.paths = [str(p) for p in (path.split(",") if isinstance(path, str) else path) if str(p)]
        if not self.paths:
            raise ValueError("RemoteTTSEngine needs at least one engine socket path")
        self.path = self.paths[0]
        self.name = name
        self.sample_rate = sample_rate
        self.connect_timeout_s = connect_timeout_s
        self._links = [Links(p, connect_timeout_s) for p in self.paths]
        self.open_streams = [0] * len(self.paths)  # per engine: this process's streams in progress
        self._turn = 0

    def _order(self) -> list[int]:
        """Engine indices to try: the fewest open streams first, ties in turn."""
        n = len(self.paths)
        start, self._turn = self._turn, (self._turn + 1) % n
        return sorted(((start + k) % n for k in range(n)), key=lambda i: self.open_streams[i])

    async def _connect(self) -> tuple[int, Connection]:
        error: EngineUnavailable | None = None
        for i in self._order():
            try:
                return i, await self._links[i].get()
            except EngineUnavailable as exc:  # restarting: the next engine takes the stream
                error = exc
        assert error is not None
        raise error

    @classmethod
    def connect(cls, path: str, timeout_s: float = 5.0) -> RemoteTTSEngine:
        """Blocking: ask the engine process its TTS name and rate (its ``hello``); raises ``EngineUnavailable``."""
        info = hello(path, timeout_s)
        return cls(path, name=info["name"], sample_rate=int(info["sample_rate"]))

    async def synthesize_stream(self, text: str, *, speed: float | None = None,
                                seed: int | None = None) -> AsyncIterator[bytes]:
        """16-bit mono PCM at :attr:`sample_rate`, one piece per clause, as the engine process makes it."""
        i, conn = await self._connect()
        self.open_streams[i] += 1
        try:
            async with contextlib.aclosing(stream(conn, text, speed, seed)) as pieces:
                async for pcm in pieces:
                    yield pcm
        finally:
            self.open_streams[i] -= 1

    async def call(self, what: str, engine: int = 0) -> dict[str, Any]:
        """``hello``, ``stats`` (the batcher's counters), ``hold`` / ``release`` (no tick while held), of the
        ``engine``-th engine process."""
        return await (await self._links[engine].get()).call(what)

    def synthesize(self, text: str) -> Iterator[bytes]:
        """The blocking form (warm-ups, tools); from a thread without a running event loop."""
        async def collect() -> list[bytes]:
            conn = await Connection.open(self.path, self.connect_timeout_s)
            try:
                return [pcm async for pcm in stream(conn, text, None, None)]
            finally:
                await conn.aclose()

        yield from asyncio.run(collect())

    async def aclose(self) -> None:
        """Close this event loop's connections (open streams fail with ``EngineUnavailable``)."""
        for links in self._links:
            await links.aclose()
