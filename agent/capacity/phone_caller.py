"""Synthetic phone callers against a running ``cadence serve``, over ``/phone/ws`` on loopback.

Each caller speaks Twilio's media-stream protocol in real time both ways: ``connected`` and
``start``, then one 20 ms mu-law ``media`` message every 20 ms (a recorded prompt, then line
silence while it listens), ``mark`` echoed once the audio before it would have played, ``stop``
to hang up. Many callers share one process and stay light on CPU: one ticker task sends every
caller's frame each 20 ms (no timer per caller), payloads are base64 mu-law precomputed once per
prompt, and whether a received frame is audible is one ``bytes.translate`` (no numpy, no decode).

What a caller records is what it saw: the send time of the frame holding each prompt's last
voiced sample (its end of speech), and every bot frame's arrival (audible or not) and mark.
"""

from __future__ import annotations

import asyncio
import audioop  # C implementation; audioop-lts on Python >= 3.13
import base64
import contextlib
import json
import random
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

FRAME = 160  # 20 ms of 8 kHz mu-law
FRAME_S = 0.02
SILENCE_B64 = base64.b64encode(b"\xff" * FRAME).decode()
VOICED_LEVEL = 300  # |sample| above this (of 32768) is audible speech, not line noise


def _loud_table(level: int = VOICED_LEVEL) -> bytes:
    """mu-law byte -> 1 if its sample is louder than ``level``, else 0 (for ``bytes.translate``)."""
    pcm = audioop.ulaw2lin(bytes(range(256)), 2)
    return bytes(int(abs(int.from_bytes(pcm[2 * i:2 * i + 2], "little", signed=True)) > level) for i in range(256))


LOUD = _loud_table()


def audible(ulaw: bytes) -> bool:
    return b"\x01" in ulaw.translate(LOUD)


@dataclass(frozen=True)
class Prompt:
    """A recorded prompt as the caller sends it: base64 payloads of its 20 ms frames."""

    name: str
    payloads: tuple[str, ...]
    last_voiced: int  # index of the frame holding the last audible sample (end of speech)
    first_voiced: int

    @property
    def seconds(self) -> float:
        return len(self.payloads) * FRAME_S

    @classmethod
    def from_ulaw(cls, name: str, ulaw: bytes) -> Prompt:
        ulaw = ulaw + b"\xff" * (-len(ulaw) % FRAME)
        frames = [ulaw[i:i + FRAME] for i in range(0, len(ulaw), FRAME)]
        voiced = [i for i, f in enumerate(frames) if audible(f)]
        if not voiced:
            raise ValueError(f"prompt {name!r} has no audible frame")
        return cls(name, tuple(base64.b64encode(f).decode() for f in frames), voiced[-1], voiced[0])

    @classmethod
    def from_pcm8k(cls, name: str, pcm16: bytes) -> Prompt:
        return cls.from_ulaw(name, audioop.lin2ulaw(pcm16, 2))


@dataclass
class PhoneCallRecord:
    """Everything one phone caller saw; times are ``time.monotonic()`` seconds."""

    caller: int
    stream_sid: str = ""
    utterances: list[str] = field(default_factory=list)
    speech_starts: list[float] = field(default_factory=list)  # send time of the first audible frame
    speech_ends: list[float] = field(default_factory=list)  # send time of the last audible frame
    chunks: list[tuple[float, float, bool]] = field(default_factory=list)  # (arrival, seconds, audible)
    marks: list[tuple[float, str]] = field(default_factory=list)
    clears: list[float] = field(default_factory=list)
    connected_at: float = 0.0
    ended_at: float = 0.0
    refused: str | None = None
    close_code: int | None = None
    late_sends: int = 0  # frames the ticker sent more than 20 ms after their slot (caller-side stalls)


# Past ``max_wait_s`` plus this, a caller speaks again even while a reply still flows (a stuck stream).
LONGEST_REPLY_S = 60.0


class PhoneCaller:
    """One caller's state machine; the shared ``Ticker`` calls ``frame`` every 20 ms."""

    def __init__(self, url: str, caller: int, prompts: list[Prompt], *, stop_at: float, max_wait_s: float = 15.0,
                 pause_s: float = 0.6, lead_silence_s: float = 0.3, pause_jitter_s: float = 0.0, seed: int = 0):
        self.url = url
        self.prompts = prompts
        self.stop_at = stop_at
        self.max_wait_s = max_wait_s
        self.pause_s = pause_s  # after a reply, before the next prompt: pause_s + uniform(0, pause_jitter_s) per turn
        self.pause_jitter_s = pause_jitter_s
        self._rng = random.Random(seed)
        self._pause = self._next_pause()
        self.record = PhoneCallRecord(caller, f"MZ{uuid.uuid4().hex}")
        self.ws: Any = None
        self.done = asyncio.Event()
        self._silence_until = 0.0
        self._lead_silence_s = lead_silence_s
        self._prompt: Prompt | None = None
        self._slot: tuple[Prompt, int] | None = None  # the prompt frame in this slot, if any
        self._index = 0
        self._turn = 0
        self._eos: float | None = None
        self._last_arrival = 0.0
        self._play_end = 0.0
        self._seq = 0
        self._receiver: asyncio.Task | None = None
        self._prefix = ""

    # -- connection ---------------------------------------------------------------------------
    async def connect(self) -> bool:
        import websockets

        rec = self.record
        try:
            self.ws = await websockets.connect(self.url, max_size=1 << 20, ping_interval=None, compression=None)
        except Exception as exc:  # refused at the door (admission) or the server is gone
            rec.refused = f"connect failed: {exc!r}"
            return False
        rec.connected_at = time.monotonic()
        sid = rec.stream_sid
        call_sid = f"CA{uuid.uuid4().hex}"
        await self.ws.send(json.dumps({"event": "connected", "protocol": "Call", "version": "1.0.0"}))
        await self.ws.send(json.dumps({"event": "start", "sequenceNumber": "1", "streamSid": sid, "start": {
            "streamSid": sid, "callSid": call_sid, "accountSid": "AC" + "0" * 32, "tracks": ["inbound"],
            "customParameters": {}, "mediaFormat": {"encoding": "audio/x-mulaw", "sampleRate": 8000, "channels": 1}}}))
        self._prefix = '{"event":"media","streamSid":"' + sid + '","media":{"payload":"'
        self._silence_until = rec.connected_at + self._lead_silence_s
        self._receiver = asyncio.create_task(self._receive())
        return True

    async def hang_up(self) -> None:
        if self.ws is None:
            return
        with contextlib.suppress(Exception):
            await self.ws.send(json.dumps({"event": "stop", "streamSid": self.record.stream_sid}))
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self.ws.close(), 5.0)
        if self._receiver is not None:
            self._receiver.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._receiver
        self.record.close_code = self.ws.close_code
        self.record.ended_at = time.monotonic()

    # -- sending (called by the ticker) --------------------------------------------------------
    def frame(self, now: float) -> str | None:
        """This 20 ms slot's message; None once the call is over."""
        if self.done.is_set():
            return None
        self._slot = None
        if self._prompt is None and now >= self._silence_until and self._ready_to_speak(now):
            if now >= self.stop_at:
                self.done.set()
                return None
            self._prompt = self.prompts[self._turn % len(self.prompts)]
            self._pause = self._next_pause()  # the pause after this prompt's reply
            self.record.utterances.append(self._prompt.name)
            self._turn += 1
            self._index = 0
        payload = SILENCE_B64
        if self._prompt is not None:
            self._slot = (self._prompt, self._index)
            payload = self._prompt.payloads[self._index]
            self._index += 1
            if self._index == len(self._prompt.payloads):
                self._prompt = None
        self._seq += 1
        return self._prefix + payload + '"},"sequenceNumber":"' + str(self._seq) + '"}'

    def sent(self, at: float) -> None:
        """The slot's message went out at ``at``: note the start and the end of speech."""
        if self._slot is None:
            return
        prompt, index = self._slot
        if index == prompt.first_voiced:
            self.record.speech_starts.append(at)
        if index == prompt.last_voiced:
            self._eos = at
            self.record.speech_ends.append(at)

    def _ready_to_speak(self, now: float) -> bool:
        """The first prompt, or the reply has played (plus a pause: a reply that stalls that long loses the
        floor), or no reply came within ``max_wait_s``. A reply still flowing is never talked over because
        it is long: ``max_wait_s`` counts only while nothing has come."""
        eos = self._eos
        if eos is None:
            return True
        if self._last_arrival < eos:
            return now >= eos + self.max_wait_s
        if now >= eos + self.max_wait_s + LONGEST_REPLY_S:  # a reply that never ends must not hold the level
            return True
        return now >= max(self._play_end, self._last_arrival) + self._pause

    def _next_pause(self) -> float:
        return self.pause_s + (self._rng.uniform(0.0, self.pause_jitter_s) if self.pause_jitter_s > 0 else 0.0)

    # -- receiving -----------------------------------------------------------------------------
    async def _receive(self) -> None:
        rec = self.record
        try:
            async for raw in self.ws:
                now = time.monotonic()
                msg = json.loads(raw)
                event = msg.get("event")
                if event == "media":
                    ulaw = base64.b64decode(msg["media"]["payload"])
                    seconds = len(ulaw) / 8000.0
                    rec.chunks.append((now, seconds, audible(ulaw)))
                    self._last_arrival = now
                    self._play_end = max(self._play_end, now) + seconds
                elif event == "mark":
                    name = msg["mark"]["name"]
                    rec.marks.append((now, name))
                    delay = max(0.0, self._play_end - now)
                    asyncio.get_running_loop().call_later(delay, self._echo, name)
                elif event == "clear":
                    rec.clears.append(now)
                    self._play_end = now
        except Exception:  # the socket closed under us: the call is over
            pass
        finally:
            self.done.set()

    def _echo(self, name: str) -> None:
        if self.ws is None or self.done.is_set():
            return
        msg = json.dumps({"event": "mark", "streamSid": self.record.stream_sid, "mark": {"name": name}})
        task = asyncio.ensure_future(self.ws.send(msg))
        task.add_done_callback(lambda t: t.exception() if not t.cancelled() else None)


class Ticker:
    """One task sends every live caller's frame each 20 ms on a real-time clock (catching up if late)."""

    def __init__(self) -> None:
        self.callers: list[PhoneCaller] = []
        self.late_ticks = 0
        self.ticks = 0
        self.max_lag_s = 0.0

    def add(self, caller: PhoneCaller) -> None:
        self.callers.append(caller)

    async def run(self, until: asyncio.Event) -> None:
        t0 = time.monotonic()
        tick = 0
        while not until.is_set():
            tick += 1
            due = t0 + tick * FRAME_S
            delay = due - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            lag = time.monotonic() - due
            self.max_lag_s = max(self.max_lag_s, lag)
            self.ticks += 1
            if lag > FRAME_S:
                self.late_ticks += 1
            live = [c for c in self.callers if c.ws is not None and not c.done.is_set()]
            self.callers = [c for c in self.callers if not c.done.is_set()]
            for caller in live:
                msg = caller.frame(time.monotonic())
                if msg is None:
                    continue
                try:
                    await caller.ws.send(msg)
                except Exception:
                    caller.done.set()
                    continue
                caller.sent(time.monotonic())
                if lag > FRAME_S:
                    caller.record.late_sends += 1


async def phone_call(url: str, caller: int, prompts: list[Prompt], ticker: Ticker, *, stop_at: float,
                     max_wait_s: float = 15.0, pause_s: float = 0.6, pause_jitter_s: float = 0.0, seed: int = 0,
                     before_hang_up: Any = None) -> PhoneCallRecord:
    """Connect, talk and listen until ``stop_at`` (then finish the turn in flight), hang up."""
    c = PhoneCaller(url, caller, prompts, stop_at=stop_at, max_wait_s=max_wait_s, pause_s=pause_s,
                    pause_jitter_s=pause_jitter_s, seed=seed)
    if not await c.connect():
        c.record.ended_at = time.monotonic()
        return c.record
    ticker.add(c)
    await c.done.wait()
    if before_hang_up is not None:
        await before_hang_up(c.record)
    await c.hang_up()
    return c.record
