"""Length-prefixed messages over a stream socket: a JSON header and an optional binary payload.

One message is ``>II`` (total length after these 4 bytes, header length), the UTF-8 JSON header, then
the payload (PCM). Every header has ``op``; stream messages carry the request ``id`` they belong to.

Client -> server: ``synth`` {id, text, speed?, seed?}, ``cancel`` {id}, ``call`` {id, what} (hello,
stats, hold, release). Server -> client: ``audio`` {id} + PCM, ``end`` {id}, ``error`` {id, message},
``reply`` {id, ...}.
"""

from __future__ import annotations

import asyncio
import json
import struct

_HEAD = struct.Struct(">II")
MAX_MESSAGE = 64 * 1024 * 1024  # far above one clause of PCM (a 24-word clause is ~0.5 MB)


class WireError(RuntimeError):
    """A malformed message: the connection is unusable."""


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
