"""Transport parameters shared by every Cadence transport (no WebRTC imports: the phone path and the
capacity callers use it on machines without aiortc/av)."""

from __future__ import annotations

from pipecat.transports.base_transport import TransportParams


def transport_params(in_rate: int, out_rate: int) -> TransportParams:
    return TransportParams(
        audio_in_enabled=True,
        audio_out_enabled=True,
        audio_in_sample_rate=in_rate,
        audio_out_sample_rate=out_rate,
    )
