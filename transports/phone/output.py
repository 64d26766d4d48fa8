"""Phone output: bot audio paced onto the socket in real time, marks, and ``clear``.

pipecat's media sender cuts the bot's audio into 20 ms chunks at 8 kHz (one soxr resample per
TTS frame) and queues them; that queue is our jitter buffer. ``write_audio_frame`` waits for the
chunk's slot on the ``PlayoutClock`` and puts one ``media`` message on the wire, measuring how
late it went. An interruption, or the caller's fast barge-in, sends ``clear`` at once and drops
whatever the far end still holds.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from loguru import logger
from pipecat.frames.frames import (
    BotStoppedSpeakingFrame,
    CancelFrame,
    EndFrame,
    Frame,
    InterruptionFrame,
    OutputAudioRawFrame,
    StartFrame,
)
from pipecat.processors.frame_processor import FrameDirection, FrameProcessorSetup
from pipecat.serializers.twilio import TwilioFrameSerializer
from pipecat.transports.base_output import BaseOutputTransport
from pipecat.transports.base_transport import TransportParams

from transports.phone.marks import MarkLedger
from transports.phone.options import PhoneOptions
from transports.phone.pacing import PlayoutClock
from transports.phone.protocol import CLOSE_NORMAL, SAMPLE_RATE, StreamStart, mark_message
from transports.phone.socket import PhoneSocket
from transports.phone.stats import CallStats


class PhoneOutputTransport(BaseOutputTransport):
    def __init__(self, socket: PhoneSocket, start: StreamStart, options: PhoneOptions,
                 params: TransportParams, stats: CallStats, **kwargs):
        super().__init__(params, **kwargs)
        self._socket = socket
        self._sid = start.stream_sid
        self._options = options
        self._stats = stats
        # pipecat's Twilio serializer: PCM frame -> {"event": "media"} and interruption -> "clear".
        self._serializer = TwilioFrameSerializer(
            start.stream_sid, start.call_sid or None,
            params=TwilioFrameSerializer.InputParams(auto_hang_up=False),
        )
        self.clock = PlayoutClock(options.lead_ms / 1000.0)
        # one media message per pipecat output chunk (phone.output_frame_ms): 16-bit PCM at 8 kHz
        self._chunk_bytes = int(SAMPLE_RATE * params.audio_out_10ms_chunks / 100) * 2
        # what ended the call's latest turn (agent.turn_ends.TurnEndNote, set by build_worker): named in the marks
        self.turn_end_note: Any = None
        self.ledger = MarkLedger(options.mark_every_ms, turn_end=self._take_turn_end)
        self._epoch = 0  # bumped by every clear/interruption: a chunk from an older epoch is dropped
        self._released = asyncio.Event()  # cleared while the bot's audio is held back
        self._released.set()
        self._hold_until: float | None = None  # end of a barge-in hold; None: until released

    def _take_turn_end(self) -> str | None:
        return self.turn_end_note.take() if self.turn_end_note is not None else None

    async def setup(self, setup: FrameProcessorSetup):
        await super().setup(setup)
        await self._serializer.setup(setup)

    async def start(self, frame: StartFrame):
        await super().start(frame)
        await self.set_transport_ready(frame)

    async def stop(self, frame: EndFrame):
        await super().stop(frame)  # the media sender writes out everything queued first
        drain = min(self.clock.buffered(time.monotonic()), self._options.drain_timeout_s)
        if drain > 0 and self._socket.open:
            await asyncio.sleep(drain)
        await self._socket.close(CLOSE_NORMAL, "call ended by the bot")

    async def cancel(self, frame: CancelFrame):
        self._release_hold()
        await super().cancel(frame)
        await self._socket.close(CLOSE_NORMAL, "call ended")

    async def process_frame(self, frame: Frame, direction: FrameDirection):
        if not isinstance(frame, InterruptionFrame):
            await super().process_frame(frame, direction)
            return
        await self.clear("interruption")  # first: the caller stops hearing the bot now
        self._hold(None)  # nothing goes out until the media sender has dropped its queue
        try:
            await super().process_frame(frame, direction)
        finally:
            self._epoch += 1  # whatever was taken from the old queue meanwhile is dropped
            self._release_hold()

    async def push_frame(self, frame: Frame, direction: FrameDirection = FrameDirection.DOWNSTREAM):
        if isinstance(frame, BotStoppedSpeakingFrame) and direction == FrameDirection.DOWNSTREAM:
            self.clock.end_spurt()
            name = self.ledger.end_reply()
            if name is not None:
                await self._send_mark(name)
        await super().push_frame(frame, direction)

    async def clear(self, reason: str, onset: float | None = None) -> bool:
        """Send ``clear`` if the caller may still hear bot audio; True when one was sent."""
        now = time.monotonic()
        if not self.clock.playing(now):
            return False
        self._epoch += 1
        dropped = self.clock.clear(now)
        self.ledger.on_clear(dropped * 1000.0)
        message = await self._serializer.serialize(InterruptionFrame())
        sent = bool(message) and await self._socket.send(message)  # type: ignore[arg-type]
        self._stats.clear()
        if onset is not None:
            self._stats.barge_in((time.monotonic() - onset) * 1000.0)
        logger.debug(f"phone {self._sid}: clear ({reason}); dropped {dropped * 1000:.0f} ms at the far end")
        return sent

    async def barge_in(self, onset: float) -> None:
        """The caller started speaking over the bot: clear now, hold the rest for the pipeline."""
        if await self.clear("barge-in", onset=onset):
            self._hold(time.monotonic() + self._options.barge_in_hold_s)

    def _hold(self, until: float | None) -> None:
        self._hold_until = until
        self._released.clear()

    def _release_hold(self) -> None:
        self._released.set()

    async def _wait_released(self) -> None:
        if self._released.is_set():
            return
        timeout = None if self._hold_until is None else max(0.0, self._hold_until - time.monotonic())
        try:
            await asyncio.wait_for(self._released.wait(), timeout)
        except TimeoutError:  # a fast barge-in the pipeline never confirmed (a cough, a door)
            logger.debug(f"phone {self._sid}: barge-in not confirmed; resuming playback")
            self._stats.barge_in_resumed += 1
            self._release_hold()

    def on_mark_echo(self, name: str) -> None:
        if self.ledger.on_echo(name) is not None:
            self._stats.marks_echoed += 1
        else:
            logger.debug(f"phone {self._sid}: echo of a mark we never sent: {name!r}")

    async def _send_mark(self, name: str) -> None:
        if await self._socket.send(mark_message(self._sid, name)):
            self._stats.marks_sent += 1

    async def write_audio_frame(self, frame: OutputAudioRawFrame) -> bool:
        if not self._socket.open:
            return False
        audio = frame.audio
        size = self._chunk_bytes
        context = getattr(frame, "context_id", None)  # a TTSAudioRawFrame's response, for the marks' names
        if len(audio) <= size:
            return await self._send_chunk(audio, frame.sample_rate, context)
        view = memoryview(audio)
        for offset in range(0, len(audio), size):
            if not await self._send_chunk(view[offset:offset + size].tobytes(), frame.sample_rate, context):
                return False
        return True

    async def _send_chunk(self, pcm: bytes, rate: int, context: str | None = None) -> bool:
        epoch, ready = self._epoch, time.monotonic()
        message = await self._serializer.serialize(OutputAudioRawFrame(pcm, sample_rate=rate, num_channels=1))
        if not message:
            return True
        await self._wait_released()
        now = time.monotonic()
        due = self.clock.due(now)
        if due > now:
            await asyncio.sleep(due - now)
        if epoch != self._epoch:
            return True  # cleared while this chunk waited: the caller must not hear it
        at = time.monotonic()
        if not await self._socket.send(message):  # type: ignore[arg-type]
            return False
        duration = len(pcm) / 2 / rate
        timing = self.clock.sent(at, duration, due, ready)
        if timing.first:
            self._stats.chunk(None, None, 0.0)
        else:
            self._stats.chunk(timing.lateness_s * 1000.0, timing.pacer_s * 1000.0, timing.gap_s * 1000.0)
        name = self.ledger.on_audio(duration * 1000.0, context)
        if name is not None:
            await self._send_mark(name)
        return True
