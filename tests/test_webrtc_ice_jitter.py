"""Loopback-only ICE (``server.webrtc_ice_hosts``) and the caller-audio jitter buffer depth, on real aiortc peers."""

from __future__ import annotations

import pytest
from aiortc import RTCPeerConnection

from transports.ice import parse_ice_hosts, restrict_ice_hosts
from transports.jitter import set_audio_prefetch


def _host_candidates(sdp: str) -> set[str]:
    return {line.split()[4] for line in sdp.splitlines() if line.startswith("a=candidate:") and " typ host" in line}


async def _offer_hosts() -> set[str]:
    pc = RTCPeerConnection()
    pc.addTransceiver("audio", direction="sendrecv")
    await pc.setLocalDescription(await pc.createOffer())
    hosts = _host_candidates(pc.localDescription.sdp)
    await pc.close()
    return hosts


async def test_restricted_peers_offer_only_loopback_and_the_default_comes_back():
    try:
        restrict_ice_hosts(["127.0.0.1"])
        assert await _offer_hosts() == {"127.0.0.1"}
    finally:
        restrict_ice_hosts([])
    assert "127.0.0.1" not in await _offer_hosts()  # aioice's default skips loopback


def test_ice_hosts_setting_is_checked():
    assert parse_ice_hosts(" 127.0.0.1, ::1 ") == ["127.0.0.1", "::1"]
    assert parse_ice_hosts("") == []
    with pytest.raises(ValueError, match="'localhost' is not an IP address"):
        parse_ice_hosts("localhost")


async def test_audio_receivers_get_the_shallow_jitter_buffer():
    offerer, answerer = RTCPeerConnection(), RTCPeerConnection()
    try:
        offerer.addTransceiver("audio", direction="sendrecv")
        await offerer.setLocalDescription(await offerer.createOffer())
        await answerer.setRemoteDescription(offerer.localDescription)
        assert set_audio_prefetch(answerer, 1) == 1
        buffer = answerer.getTransceivers()[0].receiver._RTCRtpReceiver__jitter_buffer
        assert buffer._prefetch == 1
        with pytest.raises(ValueError, match="webrtc_jitter_frames must be 1..8"):
            set_audio_prefetch(answerer, 0)
    finally:
        await offerer.close()
        await answerer.close()
