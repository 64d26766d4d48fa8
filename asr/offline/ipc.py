"""Messages between the host workers and the engine process: length-prefixed pickles on a Unix socket.

Both ends are Cadence's own processes (a socket pair made by the engine process), so pickle is
safe here; the audio itself never travels on the socket (``shm_audio``).

Worker -> engine: ``("ready", index)``, ``("reserve", rid, seconds)`` (the audio budget),
``("submit", rid, segment, lengths, language)``, or for a file sent as it decodes
``("part", rid, segment, lengths, language)`` per range and ``("close", rid)`` after the last,
``("cancel", rid)`` (ends a reservation or withdraws a submission), ``("stats", rid)``. Engine -> worker: ``("config", dict)`` first, then
``("granted", rid)``, ``("words", rid, [(start, end, text), ...])`` once per window in order,
``("end", rid)``, ``("error", rid, message)``, ``("stats", rid, dict)``.
"""

from __future__ import annotations

import asyncio
import pickle
import struct
from typing import Any

HEADER = struct.Struct("!I")
MAX_MESSAGE = 256 << 20


def frame(message: Any) -> bytes:
    body = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    return HEADER.pack(len(body)) + body


def send(writer: asyncio.StreamWriter, message: Any) -> None:
    """Queue ``message`` on ``writer`` (a closed writer drops it: the other end is gone)."""
    if not writer.is_closing():
        writer.write(frame(message))


async def receive(reader: asyncio.StreamReader) -> Any:
    """The next message; ``asyncio.IncompleteReadError`` at end of stream."""
    (n,) = HEADER.unpack(await reader.readexactly(HEADER.size))
    if n > MAX_MESSAGE:
        raise ValueError(f"an IPC message of {n} bytes (the limit is {MAX_MESSAGE})")
    return pickle.loads(await reader.readexactly(n))
