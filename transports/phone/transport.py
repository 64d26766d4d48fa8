"""``PhoneTransport``: a pipecat transport over one Twilio-style media-stream WebSocket.

Built by the endpoint after the ``start`` event; input and output share the socket, the call's
figures and the playout clock. Events: ``on_client_connected``, ``on_client_disconnected``
(fired once, whichever way the call ends).
"""

from __future__ import annotations

from aiohttp import web
from pipecat.transports.base_transport import BaseTransport, TransportParams

from transports.phone.barge_in import BargeInDetector
from transports.phone.input import PhoneInputTransport
from transports.phone.options import PhoneOptions
from transports.phone.output import PhoneOutputTransport
from transports.phone.protocol import SAMPLE_RATE, StreamStart
from transports.phone.socket import PhoneSocket
from transports.phone.stats import CallStats


def phone_params(in_sample_rate: int, output_frame_ms: float = 20.0) -> TransportParams:
    """Pipeline input at the models' rate; output at 8 kHz in ``output_frame_ms`` chunks (one media message each,
    a multiple of 10 ms)."""
    return TransportParams(
        audio_in_enabled=True,
        audio_in_sample_rate=in_sample_rate,
        audio_out_enabled=True,
        audio_out_sample_rate=SAMPLE_RATE,
        audio_out_10ms_chunks=output_chunks_10ms(output_frame_ms),
        audio_out_end_silence_secs=0,
    )


def output_chunks_10ms(output_frame_ms: float) -> int:
    """``phone.output_frame_ms`` in pipecat's 10 ms output chunks (at least one)."""
    return max(1, round(output_frame_ms / 10.0))


class PhoneTransport(BaseTransport):
    # Clear-and-hold barge-in lives in this transport; the pipeline adds no FastBargeIn stage.
    has_own_barge_in = True
    has_input_rate_cap = True  # PhoneInputTransport drops media beyond phone.max_input_rt_ratio

    def __init__(self, ws: web.WebSocketResponse, start: StreamStart, *, in_sample_rate: int = 16000,
                 options: PhoneOptions | None = None, barge_in: BargeInDetector | None = None,
                 socket: PhoneSocket | None = None):
        super().__init__(input_name=f"PhoneInput#{start.stream_sid}", output_name=f"PhoneOutput#{start.stream_sid}")
        self.start = start
        self.options = options or PhoneOptions()
        self.socket = socket or PhoneSocket(ws, f"phone {start.stream_sid}")
        self.stats = CallStats()
        params = phone_params(in_sample_rate, self.options.output_frame_ms)
        self._output = PhoneOutputTransport(self.socket, start, self.options, params, self.stats,
                                            name=self._output_name)
        self._input = PhoneInputTransport(self.socket, start, self.options, params, self.stats, self._output,
                                          self._connected, self._disconnected, barge_in, name=self._input_name)
        self._disconnect_fired = False
        self._register_event_handler("on_client_connected")
        self._register_event_handler("on_client_disconnected")

    def input(self) -> PhoneInputTransport:
        return self._input

    def output(self) -> PhoneOutputTransport:
        return self._output

    async def _connected(self) -> None:
        await self._call_event_handler("on_client_connected", self.start)

    async def _disconnected(self) -> None:
        if not self._disconnect_fired:
            self._disconnect_fired = True
            await self._call_event_handler("on_client_disconnected", self.start)
