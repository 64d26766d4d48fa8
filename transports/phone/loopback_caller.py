"""A caller that behaves like Twilio's side of a media stream, for tests, benchmarks and demos.

It sends ``connected`` and ``start``, then one 20 ms ``media`` message per 20 ms on a real-time
clock (speech when ``say`` queued some, mu-law silence otherwise, as a live line does). Received
audio goes into a model of the provider's playout buffer: a ``mark`` is echoed when the audio
before it has played, ``clear`` drops the buffer and echoes pending marks at once. Every message
is logged with its arrival time. Needs the ``websockets`` package (``pip install websockets``).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from transports.phone.codec import decode_ulaw, encode_ulaw

FRAME = 160  # 20 ms of 8 kHz mu-law
SILENCE = b"\xff" * FRAME


@dataclass
class Inbound:
    """Everything the server sent, with arrival times (``time.monotonic()``)."""

    media: list[tuple[float, bytes]] = field(default_factory=list)
    marks: list[tuple[float, str]] = field(default_factory=list)
    echoed: list[tuple[float, str]] = field(default_factory=list)
    clears: list[float] = field(default_factory=list)
    other: list[tuple[float, Any]] = field(default_factory=list)


@dataclass(frozen=True)
class Spoken:
    """Send times of an utterance's 20 ms chunks."""

    sent: list[float]

    @property
    def first(self) -> float:
        return self.sent[0]

    @property
    def last(self) -> float:
        """End of speech: the last chunk left once its 20 ms had been spoken."""
        return self.sent[-1]

    def started(self, offset_s: float) -> float:
        """When speech ``offset_s`` into the utterance began: 20 ms before its chunk was sent."""
        return self.sent[min(len(self.sent) - 1, int(offset_s / 0.02))] - 0.02


class LoopbackCaller:
    def __init__(self, url: str, *, stream_sid: str | None = None, call_sid: str | None = None,
                 custom_parameters: dict[str, str] | None = None, voiced_threshold: int = 300):
        self.url = url
        self.stream_sid = stream_sid or f"MZ{uuid.uuid4().hex}"
        self.call_sid = call_sid or f"CA{uuid.uuid4().hex}"
        self.custom_parameters = custom_parameters or {}
        self.inbound = Inbound()
        self.voiced_threshold = voiced_threshold
        self.ws: Any = None
        self._speech: asyncio.Queue[tuple[bytes, asyncio.Future]] = asyncio.Queue()
        self._tasks: list[asyncio.Task] = []
        self._play_end = 0.0
        self._pending_marks: list[tuple[float, str, asyncio.TimerHandle]] = []
        self._seq = 0
        self.closed = asyncio.Event()

    # -- connection ---------------------------------------------------------------------------
    async def connect(self, *, handshake: bool = True, stream: bool = True) -> LoopbackCaller:
        try:
            import websockets
        except ImportError as exc:  # pragma: no cover
            raise ImportError("the loopback caller needs `pip install websockets`") from exc
        self.ws = await websockets.connect(self.url, max_size=1 << 20, ping_interval=None)
        self._tasks.append(asyncio.create_task(self._receive()))
        if handshake:
            await self.send({"event": "connected", "protocol": "Call", "version": "1.0.0"})
            await self.send({"event": "start", "streamSid": self.stream_sid, "start": {
                "streamSid": self.stream_sid, "callSid": self.call_sid, "accountSid": "AC" + "0" * 32,
                "tracks": ["inbound"], "customParameters": self.custom_parameters,
                "mediaFormat": {"encoding": "audio/x-mulaw", "sampleRate": 8000, "channels": 1}}})
        if stream:
            self._tasks.append(asyncio.create_task(self._stream()))
        return self

    async def send(self, message: dict[str, Any] | str | bytes) -> bool:
        """Send one message; False once the server has closed the socket."""
        from websockets.exceptions import ConnectionClosed

        self._seq += 1
        if isinstance(message, dict):
            message = json.dumps({**message, "sequenceNumber": str(self._seq)})
        try:
            await self.ws.send(message)
            return True
        except ConnectionClosed:
            return False

    async def hang_up(self) -> None:
        """End the call the way the provider does: ``stop``, then close."""
        with contextlib.suppress(Exception):
            await self.send({"event": "stop", "streamSid": self.stream_sid,
                             "stop": {"accountSid": "AC" + "0" * 32, "callSid": self.call_sid}})
        await self.close()

    async def drop(self) -> None:
        """The network dies: the TCP connection goes away with no close handshake."""
        self.ws.transport.abort()
        await self.close()

    async def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks.clear()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self.ws.close(), 2.0)

    @property
    def close_code(self) -> int | None:
        return self.ws.close_code if self.ws is not None else None

    @property
    def close_reason(self) -> str:
        return (self.ws.close_reason or "") if self.ws is not None else ""

    async def wait_closed(self, timeout: float) -> bool:
        try:
            await asyncio.wait_for(self.closed.wait(), timeout)
            return True
        except TimeoutError:
            return False

    # -- caller's speech ----------------------------------------------------------------------
    async def say(self, pcm8k: bytes) -> Spoken:
        """Queue 8 kHz 16-bit speech; returns each 20 ms chunk's send time once all have gone out."""
        done: asyncio.Future = asyncio.get_running_loop().create_future()
        await self._speech.put((encode_ulaw(pcm8k), done))
        return await done

    async def _stream(self) -> None:
        clock = time.monotonic()
        while True:
            ulaw, done = (b"", None)
            if not self._speech.empty():
                ulaw, done = self._speech.get_nowait()
            sent: list[float] = []
            chunks = [ulaw[i:i + FRAME] for i in range(0, len(ulaw), FRAME)] or [SILENCE]
            for chunk in chunks:
                clock += 0.02  # a 20 ms packet leaves once its 20 ms have been spoken
                await asyncio.sleep(max(0.0, clock - time.monotonic()))
                if self.closed.is_set():
                    break
                sent.append(time.monotonic())
                await self.send({"event": "media", "streamSid": self.stream_sid,
                                 "media": {"track": "inbound", "chunk": str(self._seq),
                                           "timestamp": str(int((clock % 1e6) * 1000)),
                                           "payload": base64.b64encode(chunk.ljust(FRAME, b"\xff")).decode()}})
            if done is not None and not done.done():
                done.set_result(Spoken(sent or [time.monotonic()]))

    # -- what the server sends -----------------------------------------------------------------
    async def _receive(self) -> None:
        try:
            async for raw in self.ws:
                now = time.monotonic()
                msg = json.loads(raw)
                event = msg.get("event")
                if event == "media":
                    payload = base64.b64decode(msg["media"]["payload"])
                    self.inbound.media.append((now, payload))
                    self._play_end = max(self._play_end, now) + len(payload) / 8000.0
                elif event == "mark":
                    self._on_mark(now, msg["mark"]["name"])
                elif event == "clear":
                    self.inbound.clears.append(now)
                    self._play_end = now
                    for _, name, handle in self._pending_marks:
                        handle.cancel()
                        await self._echo(name)
                    self._pending_marks.clear()
                else:
                    self.inbound.other.append((now, msg))
        except Exception:
            pass
        finally:
            self.closed.set()

    def _on_mark(self, now: float, name: str) -> None:
        self.inbound.marks.append((now, name))
        delay = max(0.0, self._play_end - now)
        loop = asyncio.get_running_loop()
        handle = loop.call_later(delay, lambda: asyncio.ensure_future(self._echo(name)))
        self._pending_marks.append((now + delay, name, handle))

    async def _echo(self, name: str) -> None:
        self._pending_marks = [p for p in self._pending_marks if p[1] != name]
        self.inbound.echoed.append((time.monotonic(), name))
        with contextlib.suppress(Exception):
            await self.send({"event": "mark", "streamSid": self.stream_sid, "mark": {"name": name}})

    # -- analysis ------------------------------------------------------------------------------
    def voiced(self, payload: bytes) -> bool:
        import numpy as np

        return int(np.abs(np.frombuffer(decode_ulaw(payload), dtype="<i2")).max()) > self.voiced_threshold

    def first_voiced_after(self, t: float) -> float | None:
        return next((at for at, p in self.inbound.media if at >= t and self.voiced(p)), None)

    def speech_heard_until(self, start: float, stop: float) -> float | None:
        """When the caller stopped hearing bot speech that arrived in ``[start, stop)``: the playout
        buffer plays each chunk after the ones before it (from its arrival at the earliest), and a
        ``clear`` drops whatever was still to play. None when no voiced chunk arrived then."""
        events = sorted([(at, p) for at, p in self.inbound.media if start <= at < stop]
                        + [(at, None) for at in self.inbound.clears if start <= at < stop], key=lambda e: e[0])
        play_end, voiced_end = start, None
        for at, payload in events:
            if payload is None:  # clear: the rest of the buffer is never played
                play_end = at
                if voiced_end is not None:
                    voiced_end = min(voiced_end, at)
                continue
            play_end = max(play_end, at) + len(payload) / 8000.0
            if self.voiced(payload):
                voiced_end = play_end
        return voiced_end

    async def wait_reply(self, after: float, *, timeout_s: float = 20.0, settle_s: float = 1.0,
                         end_suffix: str = "-end") -> tuple[float, float] | None:
        """Wait for a whole bot reply that starts after ``after``: (first audio, end) arrival times.

        Cadence ends each stretch of bot speech with a mark named ``...-end``; the reply is over
        at an end mark followed by ``settle_s`` without audio (a reply may come in several
        stretches). None when no audio came within ``timeout_s``; then the end is the last audio.
        """
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            first = self.first_voiced_after(after)
            if first is not None:
                ends = [at for at, name in self.inbound.marks if at >= first and name.endswith(end_suffix)]
                last_media = self.inbound.media[-1][0]
                if ends and ends[-1] >= last_media and time.monotonic() - last_media >= settle_s:
                    return first, ends[-1]
            await asyncio.sleep(0.05)
        first = self.first_voiced_after(after)
        media = [at for at, _ in self.inbound.media if at >= after]
        return (first, media[-1]) if first is not None else None

    def audio_between(self, t0: float, t1: float) -> bytes:
        """The bot's audio that arrived in [t0, t1), as 8 kHz 16-bit PCM."""
        return decode_ulaw(b"".join(p for at, p in self.inbound.media if t0 <= at < t1))
