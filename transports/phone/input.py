"""Phone input: the provider's messages after ``start``, validated, decoded and pushed.

Each ``media`` payload is decoded once (mu-law -> PCM, one soxr call to the pipeline rate) and
pushed as an ``InputAudioRawFrame``; the 8 kHz PCM also feeds the fast barge-in detector.
``mark`` echoes go to the output's ledger, ``dtmf`` becomes ``InputDTMFFrame``. A protocol error
closes the socket with its code and reason; ``stop``, a peer close, a dropped connection or
``idle_timeout_s`` of silence ends the call. Any other error (a bug, a frame nothing expected)
closes the socket with 1011 and ends the call too: every way out fires ``on_client_disconnected``,
so the call's admission slot always comes back. Media beyond ``max_input_rt_ratio`` times real
time (after an ``input_burst_s`` allowance) is dropped and counted, never queued for the ASR.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable

from aiohttp import WSMsgType
from loguru import logger
from pipecat.audio.dtmf.types import KeypadEntry
from pipecat.frames.frames import CancelFrame, EndFrame, InputAudioRawFrame, InputDTMFFrame, StartFrame
from pipecat.transports.base_input import BaseInputTransport
from pipecat.transports.base_transport import TransportParams

from transports import ARRIVED
from transports.input_rate import RealTimeBudget
from transports.phone.barge_in import BargeInDetector
from transports.phone.codec import InboundDecoder
from transports.phone.options import PhoneOptions
from transports.phone.output import PhoneOutputTransport
from transports.phone.protocol import (
    CLOSE_INTERNAL,
    CLOSE_INVALID_PAYLOAD,
    CLOSE_NORMAL,
    CLOSE_POLICY,
    Message,
    ProtocolError,
    StreamStart,
    parse_message,
)
from transports.phone.socket import PhoneSocket
from transports.phone.stats import CallStats

_CLOSED = (WSMsgType.CLOSE, WSMsgType.CLOSING, WSMsgType.CLOSED, WSMsgType.ERROR)
_INBOUND_TRACKS = ("inbound", "inbound_track")
MAX_DTMF = 1000


class PhoneInputTransport(BaseInputTransport):
    def __init__(self, socket: PhoneSocket, start: StreamStart, options: PhoneOptions,
                 params: TransportParams, stats: CallStats, output: PhoneOutputTransport,
                 on_connected: Callable[[], Awaitable[None]], on_disconnected: Callable[[], Awaitable[None]],
                 barge_in: BargeInDetector | None = None, **kwargs):
        super().__init__(params, **kwargs)
        self._socket = socket
        self._sid = start.stream_sid
        self._options = options
        self._stats = stats
        self._output = output
        self._on_connected = on_connected
        self._on_disconnected = on_disconnected
        self._barge_in = barge_in
        self._decoder: InboundDecoder | None = None
        self._pending = bytearray()  # decoded caller audio not yet pushed (phone.input_frame_ms)
        self._frame_bytes = 0
        self._task = None
        self._budget = RealTimeBudget(options.max_input_rt_ratio, options.input_burst_s)
        self.error: ProtocolError | None = None

    async def start(self, frame: StartFrame):
        await super().start(frame)
        await self.set_transport_ready(frame)
        self._decoder = InboundDecoder(self.sample_rate)
        self._frame_bytes = 2 * int(self.sample_rate * self._options.input_frame_ms / 1000)
        await self._on_connected()
        if self._task is None:
            self._task = self.create_task(self._receive(), name=f"phone-{self._sid}-receive")

    async def stop(self, frame: EndFrame):
        await self._stop_receiving()
        await super().stop(frame)

    async def cancel(self, frame: CancelFrame):
        await self._stop_receiving()
        await super().cancel(frame)

    async def cleanup(self):
        await super().cleanup()
        await self._stop_receiving()

    async def _push_audio(self, pcm: bytes) -> None:
        """Caller audio into the pipeline in frames of at least ``phone.input_frame_ms`` (each frame costs every
        processor and observer one hand-off, whatever its length)."""
        if not self._pending and len(pcm) >= self._frame_bytes:
            frame = pcm
        else:
            self._pending += pcm
            if len(self._pending) < self._frame_bytes:
                return
            frame = bytes(self._pending)
            self._pending.clear()  # the buffer is kept: no new allocation per frame
        audio = InputAudioRawFrame(audio=frame, sample_rate=self.sample_rate, num_channels=1)
        audio.metadata[ARRIVED] = time.monotonic()  # agent.timed_vad: how late the VAD hears it
        await self.push_audio_frame(audio)

    async def _stop_receiving(self) -> None:
        if self._task is not None:
            task, self._task = self._task, None
            await self.cancel_task(task)

    async def _receive(self) -> None:
        try:
            while True:
                try:
                    msg = await self._socket.receive(self._options.idle_timeout_s)
                except TimeoutError:
                    raise ProtocolError(CLOSE_POLICY, f"no message for {self._options.idle_timeout_s:g} s: "
                                                      "the stream is considered dropped") from None
                if msg.type in _CLOSED:
                    self._socket.peer_closed(self._socket.ws.close_code, str(msg.extra or ""))
                    logger.info(f"phone {self._sid}: socket closed by the peer ({self._socket.close_code})")
                    break
                data = msg.data if msg.type in (WSMsgType.TEXT, WSMsgType.BINARY) else b""
                if not await self._handle(parse_message(data, self._options.max_payload_bytes)):
                    break
        except ProtocolError as exc:
            self.error = exc
            self._stats.totals.protocol_error(exc.code)
            logger.warning(f"phone {self._sid}: protocol error {exc.code}: {exc.reason}")
            await self._socket.close(exc.code, exc.reason)
        except Exception as exc:  # never leave a call without its receive task
            logger.exception(f"phone {self._sid}: the receive task failed")
            self.error = ProtocolError(CLOSE_INTERNAL, f"internal error: {type(exc).__name__}")
            self._stats.totals.protocol_error(CLOSE_INTERNAL)
            await self._socket.close(CLOSE_INTERNAL, self.error.reason)
        await self._on_disconnected()  # (cancelled: the pipeline is already stopping)

    async def _handle(self, msg: Message) -> bool:
        """Act on one message; False ends the call."""
        if msg.stream_sid is not None and msg.stream_sid != self._sid:
            raise ProtocolError(CLOSE_POLICY, f"message for stream {msg.stream_sid[:40]!r} on stream {self._sid!r}")
        if msg.event == "media":
            if msg.track in _INBOUND_TRACKS:
                await self._media(msg.payload)
        elif msg.event == "mark":
            self._output.on_mark_echo(msg.mark_name)
        elif msg.event == "dtmf":
            try:
                button = KeypadEntry(msg.digit)
            except ValueError:
                raise ProtocolError(CLOSE_INVALID_PAYLOAD, f"unknown DTMF digit {msg.digit[:8]!r}") from None
            if len(self._stats.dtmf) < MAX_DTMF:
                self._stats.dtmf.append(msg.digit)
            await self.push_frame(InputDTMFFrame(button=button))
        elif msg.event == "stop":
            logger.info(f"phone {self._sid}: stream stopped by the provider")
            await self._socket.close(CLOSE_NORMAL, "stream stopped")
            return False
        else:  # connected / start again
            raise ProtocolError(CLOSE_POLICY, f"unexpected '{msg.event}' after the stream started")
        return True

    async def _media(self, payload: bytes) -> None:
        assert self._decoder is not None
        arrived = time.monotonic()
        self._stats.media_in += 1
        if not self._budget.take(len(payload) / 8000.0, arrived):
            self._stats.media_dropped += 1
            return
        pcm8k, pcm = await self._decoder.decode(payload)
        if pcm:
            await self._push_audio(pcm)
        detector = self._barge_in
        if detector is None or not detector.feed(pcm8k, arrived):
            return
        if detector.onset is not None and self._output.clock.playing(arrived):
            await self._output.barge_in(detector.onset)
