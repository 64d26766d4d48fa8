"""Streaming Parakeet in the engine process: its ``StreamBatcher`` served over the engine socket.

Engine side, ``StreamHost`` (one per connection) maps the client's session ids onto real
``StreamSession``s of the process's one ``StreamBatcher``: ``asr_open`` / ``asr_feed`` (float32 samples) /
``asr_partial`` / ``asr_close`` {sid}; ``asr_final`` {sid, id} is answered with a ``reply`` carrying the
final result; partials are pushed as ``asr_result`` {sid, ...}. A closed connection closes its sessions.

Session side, ``RemoteStreamBatcher`` has the batcher methods ``ParakeetSTTService`` calls (``open``,
``feed``, ``request_partial``, ``finalize``, ``close``, ``config.sample_rate``), so the service is
unchanged. ``open`` and ``feed`` are synchronous there: audio fed before this loop's connection is up is
buffered and flushed in order. A lost engine fails ``finalize`` with ``EngineUnavailable``.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import itertools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from asr.parakeet.streaming import StreamResult
from transports.engine_link import Connection, EngineUnavailable, Links

PartialCallback = Callable[[StreamResult], None]
_sids = itertools.count(1)


def _result_fields(result: StreamResult) -> dict[str, Any]:
    return {k: v for k, v in dataclasses.asdict(result).items() if k != "session_id"}


def _result(sid: int, header: dict) -> StreamResult:
    return StreamResult(sid, bool(header["final"]), header["text"], list(header["tokens"]), list(header["frames"]),
                        list(header["durations"]), float(header["audio_s"]), bool(header.get("fresh")))


class StreamHost:
    """One connection's streaming sessions on the engine process's batcher."""

    def __init__(self, batcher: Any, send: Callable[[dict], None]):
        self.batcher = batcher
        self._send = send
        self._sessions: dict[int, Any] = {}
        self._finals: set[asyncio.Task] = set()

    def handle(self, header: dict, payload: bytes) -> None:
        op, sid = header["op"], int(header["sid"])
        if op == "asr_open":
            def on_partial(result: StreamResult, sid: int = sid) -> None:
                self._send({"op": "asr_result", "sid": sid, **_result_fields(result)})

            self._sessions[sid] = self.batcher.open(on_partial=on_partial)
        elif op == "asr_close":
            if (session := self._sessions.pop(sid, None)) is not None:
                self.batcher.close(session)
        elif (session := self._sessions.get(sid)) is None:
            self._send({"op": "error", "id": header.get("id"), "message": f"no ASR session {sid}"})
        elif op == "asr_feed":
            self.batcher.feed(session, np.frombuffer(payload, dtype="<f4"))
        elif op == "asr_partial":
            self.batcher.request_partial(session, fresh=bool(header.get("fresh")))
        elif op == "asr_final":
            task = asyncio.create_task(self._final(session, header.get("id")))
            self._finals.add(task)
            task.add_done_callback(self._finals.discard)
        else:
            raise ValueError(f"unknown ASR op {op!r}")

    async def _final(self, session: Any, rid: int) -> None:
        try:
            result = await self.batcher.finalize(session)
        except Exception as exc:
            self._send({"op": "error", "id": rid, "message": f"{type(exc).__name__}: {exc}"})
        else:
            self._send({"op": "reply", "id": rid, **_result_fields(result)})

    def close(self) -> None:
        for task in self._finals:
            task.cancel()
        for session in self._sessions.values():
            self.batcher.close(session)
        self._sessions.clear()


@dataclass(frozen=True)
class RemoteStreamConfig:
    sample_rate: int = 16000


@dataclass(eq=False)
class RemoteSession:
    """A client-side stream; ``id`` is its ``sid`` on the connection."""

    on_partial: PartialCallback | None
    id: int = field(default_factory=lambda: next(_sids))
    conn: Connection | None = None
    buffered: list[tuple[dict, bytes]] = field(default_factory=list)
    attached: asyncio.Future | None = None
    closed: bool = False
    unsent: list[bytes] = field(default_factory=list)  # fed audio not yet sent (``feed_ms`` coalescing)
    unsent_bytes: int = 0
    fed: int = 0  # feed calls
    feeds_sent: int = 0  # asr_feed messages sent


class RemoteStreamBatcher:
    """``StreamBatcher``'s session API, served by the engine process at ``path``."""

    def __init__(self, path: str, sample_rate: int = 16000, model_name: str = "parakeet-tdt",
                 connect_timeout_s: float = 2.0, feed_ms: float = 100.0):
        self.path = str(path)
        self.config = RemoteStreamConfig(sample_rate)
        # A transport's 20 ms frames are sent ``feed_ms`` at a time (and at once before a partial request, a
        # final or a close): 256 callers fed 12,800 messages a second to the ASR engine process's one loop
        # (run 31: that process at ~0.9 cores). 0 sends every frame.
        self._flush_bytes = int(sample_rate * feed_ms / 1000) * 4
        self.model_name = model_name
        self._links = Links(self.path, connect_timeout_s)

    def open(self, on_partial: PartialCallback | None = None) -> RemoteSession:
        session = RemoteSession(on_partial)
        session.attached = asyncio.get_running_loop().create_future()
        conn = self._links.current()
        if conn is not None:
            self._attach(session, conn)
        else:
            asyncio.ensure_future(self._connect(session))
        return session

    async def _connect(self, session: RemoteSession) -> None:
        try:
            conn = await self._links.get()
        except EngineUnavailable as exc:
            if session.attached is not None and not session.attached.done():
                session.attached.set_exception(exc)
                session.attached.exception()  # retrieved here: finalize re-raises it
            return
        if not session.closed:
            self._attach(session, conn)

    def _attach(self, session: RemoteSession, conn: Connection) -> None:
        def listener(header: dict, _payload: bytes) -> None:
            if header["op"] == "asr_result" and session.on_partial is not None:
                session.on_partial(_result(session.id, header))

        session.conn = conn
        conn.listeners[session.id] = listener
        conn.send({"op": "asr_open", "sid": session.id})
        for header, payload in session.buffered:
            conn.send(header, payload)
        session.buffered.clear()
        if session.attached is not None and not session.attached.done():
            session.attached.set_result(None)

    def _send(self, session: RemoteSession, header: dict, payload: bytes = b"") -> None:
        if session.conn is None:
            session.buffered.append((header, payload))
        elif session.conn.usable:
            session.conn.send(header, payload)

    def feed(self, session: RemoteSession, samples: np.ndarray) -> None:
        data = np.asarray(samples, dtype="<f4").tobytes()
        session.fed += 1
        session.unsent.append(data)
        session.unsent_bytes += len(data)
        if session.unsent_bytes >= self._flush_bytes:
            self._flush(session)

    def _flush(self, session: RemoteSession) -> None:
        """Send the audio fed since the last send, as one ``asr_feed``."""
        if not session.unsent:
            return
        data = session.unsent[0] if len(session.unsent) == 1 else b"".join(session.unsent)
        session.unsent.clear()
        session.unsent_bytes = 0
        session.feeds_sent += 1
        self._send(session, {"op": "asr_feed", "sid": session.id}, data)

    def request_partial(self, session: RemoteSession, fresh: bool = False) -> None:
        self._flush(session)
        self._send(session, {"op": "asr_partial", "sid": session.id, **({"fresh": True} if fresh else {})})

    async def finalize(self, session: RemoteSession) -> StreamResult:
        assert session.attached is not None
        self._flush(session)
        await session.attached
        conn = session.conn
        assert conn is not None
        rid = conn.next_id()
        with conn.inbox(rid) as inbox:
            conn.send({"op": "asr_final", "sid": session.id, "id": rid})
            header, _ = await inbox.get()
        if header["op"] == "reply":
            return _result(session.id, header)
        if header["op"] == "error":
            raise RuntimeError(f"the ASR engine process failed: {header.get('message')}")
        raise conn.error or EngineUnavailable("the engine connection was lost")

    def close(self, session: RemoteSession) -> None:
        session.unsent.clear()  # a closed session's audio is never decoded
        session.closed = True
        conn = session.conn
        if conn is not None:
            conn.listeners.pop(session.id, None)
            if conn.usable:
                with contextlib.suppress(Exception):
                    conn.send({"op": "asr_close", "sid": session.id})

    async def aclose(self) -> None:
        await self._links.aclose()
