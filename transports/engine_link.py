"""The session processes' link to the engine process: length-prefixed messages over a Unix socket.

One message is ``>II`` (total length after these 4 bytes, header length), a UTF-8 JSON header with an
``op``, then a raw payload (PCM or float32 audio). ``Connection`` is the client end: one per event loop
and engine socket, multiplexing request/response ``call``s, streams (an inbox per request ``id``) and
pushes to listeners (by session ``sid``). When the socket breaks, every inbox gets ``{"op": "lost"}``,
every call fails and every listener is told, with ``EngineUnavailable``.

Ops of the TTS (``tts.remote``): ``synth`` {id, text, speed?, seed?} -> ``audio`` {id} + PCM ... ``end``
{id} | ``error`` {id, message}; ``cancel`` {id}. Of the ASR (``asr.parakeet.remote``): ``asr_open`` /
``asr_feed`` (+ float32) / ``asr_partial`` / ``asr_close`` {sid}, ``asr_final`` {sid, id} -> ``reply``;
partial results pushed as ``asr_result`` {sid, ...}. Shared: ``call`` {id, what} -> ``reply`` {id, ...}.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import struct
from collections.abc import Callable, Iterator
from typing import Any

_HEAD = struct.Struct(">II")
MAX_MESSAGE = 64 * 1024 * 1024  # far above one clause of PCM (a 24-word clause is ~0.5 MB)
Listener = Callable[[dict, bytes], None]


class WireError(RuntimeError):
    """A malformed message: the connection is unusable."""


class EngineUnavailable(RuntimeError):
    """The engine process cannot be reached (not started, died, restarting)."""


def encode(header: dict, payload: bytes = b"") -> bytes:
    """One message: ``header`` (JSON-serializable) and ``payload``."""
    head = json.dumps(header, separators=(",", ":")).encode()
    return _HEAD.pack(4 + len(head) + len(payload), len(head)) + head + payload


async def read_message(reader: asyncio.StreamReader) -> tuple[dict, bytes]:
    """The next message; ``asyncio.IncompleteReadError`` at end of stream, ``WireError`` when malformed."""
    total, head_len = _HEAD.unpack(await reader.readexactly(_HEAD.size))
    if total > MAX_MESSAGE or head_len > total - 4:
        raise WireError(f"bad message size (total {total}, header {head_len})")
    body = await reader.readexactly(total - 4)
    try:
        header = json.loads(body[:head_len])
    except ValueError as exc:
        raise WireError(f"bad message header: {exc}") from None
    if not isinstance(header, dict) or "op" not in header:
        raise WireError(f"message header without op: {header!r}")
    return header, body[head_len:]


class Connection:
    """The client end of one socket to the engine process (see the module docstring)."""

    def __init__(self, path: str, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        self.path = path
        self._reader, self._writer = reader, writer
        self._ids = itertools.count(1)
        self._inboxes: dict[int, asyncio.Queue] = {}
        self._calls: dict[int, asyncio.Future] = {}
        self.listeners: dict[int, Listener] = {}
        self.error: EngineUnavailable | None = None
        self._task = asyncio.create_task(self._read_loop(), name="engine-link-reader")

    @classmethod
    async def open(cls, path: str, timeout_s: float) -> Connection:
        try:
            reader, writer = await asyncio.wait_for(asyncio.open_unix_connection(path), timeout_s)
        except (TimeoutError, OSError) as exc:
            raise EngineUnavailable(f"the engine process is not reachable at {path}: {exc!r}") from None
        return cls(path, reader, writer)

    @property
    def usable(self) -> bool:
        return self.error is None and not self._writer.is_closing()

    def next_id(self) -> int:
        return next(self._ids)

    async def _read_loop(self) -> None:
        try:
            while True:
                header, payload = await read_message(self._reader)
                rid = header.get("id")
                if header["op"] in ("reply", "error") and rid in self._calls:
                    fut = self._calls.pop(rid)
                    if fut.done():
                        continue
                    if header["op"] == "reply":
                        fut.set_result(header)
                    else:
                        fut.set_exception(RuntimeError(header.get("message", "engine error")))
                elif (inbox := self._inboxes.get(rid)) is not None:
                    inbox.put_nowait((header, payload))
                elif (listener := self.listeners.get(header.get("sid"))) is not None:
                    listener(header, payload)
        except (asyncio.IncompleteReadError, ConnectionError, OSError, WireError) as exc:
            self.error = EngineUnavailable(f"the engine process at {self.path} went away ({exc!r}); "
                                           "it is restarting or down")
        except asyncio.CancelledError:
            self.error = EngineUnavailable("the engine connection was closed")
            raise
        finally:
            self.error = self.error or EngineUnavailable("the engine connection ended")
            self._writer.close()
            for inbox in self._inboxes.values():
                inbox.put_nowait(({"op": "lost"}, b""))
            for fut in self._calls.values():
                if not fut.done():
                    fut.set_exception(self.error)
            self._calls.clear()
            for listener in list(self.listeners.values()):
                with contextlib.suppress(Exception):
                    listener({"op": "lost"}, b"")

    def send(self, header: dict, payload: bytes = b"") -> None:
        """Queue one message (no wait: the socket buffers; ordering per connection is kept)."""
        if not self.usable:
            raise self.error or EngineUnavailable("the engine connection is closed")
        self._writer.write(encode(header, payload))

    async def call(self, what: str, timeout_s: float = 30.0, **fields: Any) -> dict[str, Any]:
        """``call`` {what, fields} -> the ``reply`` header."""
        rid = self.next_id()
        fut = asyncio.get_running_loop().create_future()
        self._calls[rid] = fut
        try:
            self.send({"op": "call", "id": rid, "what": what, **fields})
            return await asyncio.wait_for(fut, timeout_s)
        finally:
            self._calls.pop(rid, None)

    @contextlib.contextmanager
    def inbox(self, rid: int) -> Iterator[asyncio.Queue]:
        """The queue of messages with ``id == rid`` while the block runs."""
        queue: asyncio.Queue = asyncio.Queue()
        self._inboxes[rid] = queue
        try:
            yield queue
        finally:
            self._inboxes.pop(rid, None)

    async def aclose(self) -> None:
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await self._task


class Links:
    """One ``Connection`` per event loop to ``path``, reopened when broken (a restarted engine process)."""

    def __init__(self, path: str, connect_timeout_s: float = 2.0):
        import weakref

        self.path = path
        self.connect_timeout_s = connect_timeout_s
        self._by_loop: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Connection] = weakref.WeakKeyDictionary()

    def current(self) -> Connection | None:
        """This loop's connection if it is usable (no await: for synchronous senders)."""
        conn = self._by_loop.get(asyncio.get_running_loop())
        return conn if conn is not None and conn.usable else None

    async def get(self) -> Connection:
        loop = asyncio.get_running_loop()
        conn = self._by_loop.get(loop)
        if conn is None or not conn.usable:
            conn = self._by_loop[loop] = await Connection.open(self.path, self.connect_timeout_s)
        return conn

    async def aclose(self) -> None:
        conn = self._by_loop.pop(asyncio.get_running_loop(), None)
        if conn is not None:
            await conn.aclose()


def hello(path: str, timeout_s: float = 5.0) -> dict[str, Any]:
    """Blocking probe (no running loop in this thread): the engine process's ``hello`` or ``EngineUnavailable``."""
    async def ask() -> dict[str, Any]:
        conn = await Connection.open(path, timeout_s)
        try:
            return await conn.call("hello", timeout_s)
        finally:
            await conn.aclose()

    try:
        return asyncio.run(ask())
    except TimeoutError:
        raise EngineUnavailable(f"the engine process at {path} did not answer within {timeout_s:g} s") from None
