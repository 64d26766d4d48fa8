"""A real aiortc caller: plays audio into a Cadence server over WebRTC and records the reply.

Used by the WebRTC end-to-end tests and ``bench/webrtc_latency.py``; the capacity tool does not use
it (its callers drive the pipeline in-process: ``agent.capacity.caller``). The microphone track is
paced in real time (20 ms frames at 48 kHz); received audio frames are kept with their arrival
times, data-channel messages with theirs. ICE host candidates are loopback only by default.
"""

from __future__ import annotations

import asyncio
import fractions
import json
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import aiohttp
import numpy as np
import soxr
from aiortc import MediaStreamTrack, RTCPeerConnection, RTCSessionDescription
from av import AudioFrame

from transports.ice import LOOPBACK, restrict_ice_hosts
from transports.jitter import check_prefetch, set_audio_prefetch

RATE = 48000
FRAME = 960  # 20 ms


class PacedAudioTrack(MediaStreamTrack):
    """A microphone that says the queued utterances in order and is silent otherwise."""

    kind = "audio"

    def __init__(self) -> None:
        super().__init__()
        self._queue: list[np.ndarray] = []
        self._current: np.ndarray | None = None
        self._pos = 0
        self._pts = 0
        self._start: float | None = None
        self.speech_end_times: list[float] = []
        self.speech_onset_times: list[float] = []
        # When the frame carrying each utterance's last voiced sample was sent (``say(voiced_end_s=)``).
        self.voiced_end_times: list[float] = []
        self._marks: list[int | None] = []
        self._mark: int | None = None
        self._onset_pending = False
        self.idle = asyncio.Event()
        self.idle.set()

    def say(self, audio_16k: np.ndarray, voiced_end_s: float | None = None) -> None:
        """Queue an utterance (mono float32 at 16 kHz); ``voiced_end_s``: where its last voiced sample is."""
        self._queue.append(soxr.resample(audio_16k, 16000, RATE).astype(np.float32))
        self._marks.append(None if voiced_end_s is None else max(0, int(voiced_end_s * RATE) - 1))
        self.idle.clear()

    async def recv(self) -> AudioFrame:
        if self._start is None:
            self._start = time.monotonic()
        self._pts += FRAME
        wait = self._start + self._pts / RATE - time.monotonic()
        if wait > 0:
            await asyncio.sleep(wait)
        out = np.zeros(FRAME, dtype=np.float32)
        if self._current is None and self._queue:
            self._current, self._pos = self._queue.pop(0), 0
            self._mark = self._marks.pop(0)
            self._onset_pending = True
        if self._current is not None:
            piece = self._current[self._pos : self._pos + FRAME]
            out[: len(piece)] = piece
            if self._onset_pending and piece.size and float(np.abs(piece).max()) > 0.02:
                self._onset_pending = False
                # The frame leaves when this call returns: its send time is now.
                self.speech_onset_times.append(time.monotonic())
            if self._mark is not None and self._pos <= self._mark < self._pos + FRAME:
                self.voiced_end_times.append(time.monotonic())  # sent when this call returns
            self._pos += FRAME
            if self._pos >= len(self._current):
                self._current = None
                self.speech_end_times.append(time.monotonic())
                if not self._queue:
                    self.idle.set()
        pcm = (np.clip(out, -1, 1) * 32767).astype(np.int16).reshape(1, -1)
        frame = AudioFrame.from_ndarray(pcm, format="s16", layout="mono")
        frame.sample_rate = RATE
        frame.pts = self._pts
        frame.time_base = fractions.Fraction(1, RATE)
        return frame


@dataclass
class ReceivedAudio:
    chunks: list[tuple[float, np.ndarray]] = field(default_factory=list)  # (arrival, mono int16 @ rate)
    sample_rate: int = RATE

    def voiced_after(self, t: float, threshold: int = 300) -> float | None:
        for at, pcm in self.chunks:
            if at >= t and pcm.size and int(np.abs(pcm).max()) > threshold:
                return at
        return None

    def audio_between(self, t0: float, t1: float) -> np.ndarray:
        parts = [pcm for at, pcm in self.chunks if t0 <= at < t1]
        return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int16)


class WebRTCCaller:
    """One caller: connect, ``say`` utterances, read back what the bot said and when."""

    def __init__(self, base_url: str, api_key: str = "", ice_hosts: Sequence[str] = LOOPBACK,
                 data_channel: bool = False, jitter_frames: int | None = None):
        """``jitter_frames``: the depth of this caller's receive jitter buffer (``transports.jitter``); None:
        aiortc's own (4 frames, 80 ms before the bot's first audio is heard)."""
        self.base_url = base_url.rstrip("/")
        self.api_key = api_key
        restrict_ice_hosts(ice_hosts)  # process-wide: before the peer connection gathers
        self.pc = RTCPeerConnection()
        self.mic = PacedAudioTrack()
        self.received = ReceivedAudio()
        self.messages: list[tuple[float, dict]] = []  # (arrival, JSON message) from the data channel
        self.pc_id: str | None = None
        self._reader: asyncio.Task | None = None
        self._data_channel = data_channel
        self._jitter_frames = None if jitter_frames is None else check_prefetch(jitter_frames)

    async def connect(self, timeout_s: float = 20.0) -> None:
        self.pc.addTransceiver(self.mic, direction="sendrecv")
        if self._jitter_frames is not None:
            set_audio_prefetch(self.pc, self._jitter_frames)
        if self._data_channel:
            channel = self.pc.createDataChannel("cadence")

            @channel.on("message")
            def on_message(message: str | bytes) -> None:
                try:
                    data = json.loads(message)
                except ValueError:
                    return
                if isinstance(data, dict):
                    self.messages.append((time.monotonic(), data))

        @self.pc.on("track")
        def on_track(track: MediaStreamTrack) -> None:
            if track.kind == "audio":
                self._reader = asyncio.ensure_future(self._read(track))

        await self.pc.setLocalDescription(await self.pc.createOffer())
        offer = {"sdp": self.pc.localDescription.sdp, "type": self.pc.localDescription.type}
        async with aiohttp.ClientSession() as http, http.post(
            f"{self.base_url}/api/offer", json=offer, timeout=aiohttp.ClientTimeout(total=timeout_s),
            headers={"Authorization": f"Bearer {self.api_key}"} if self.api_key else None,
        ) as resp:
            body = await resp.json()
            if resp.status != 200:
                raise ConnectionRefusedError(f"HTTP {resp.status}: {body.get('error')}")
        self.pc_id = body.get("pc_id")
        await self.pc.setRemoteDescription(RTCSessionDescription(sdp=body["sdp"], type=body["type"]))

    async def _read(self, track: MediaStreamTrack) -> None:
        while True:
            try:
                frame = await track.recv()
            except Exception:
                return
            pcm = frame.to_ndarray()
            if pcm.ndim == 2 and pcm.shape[0] == 1 and frame.layout.name == "stereo":
                pcm = pcm.reshape(-1, 2)[:, 0]
            self.received.sample_rate = frame.sample_rate
            self.received.chunks.append((time.monotonic(), pcm.reshape(-1).astype(np.int16)))

    def say(self, audio_16k: np.ndarray, voiced_end_s: float | None = None) -> None:
        self.mic.say(audio_16k, voiced_end_s)

    async def wait_connected(self, timeout_s: float = 20.0) -> None:
        deadline = time.monotonic() + timeout_s
        while self.pc.connectionState != "connected":
            if self.pc.connectionState in ("failed", "closed") or time.monotonic() > deadline:
                raise ConnectionError(f"WebRTC connection {self.pc.connectionState} after {timeout_s:g} s")
            await asyncio.sleep(0.02)

    def ice_pairs(self) -> list[tuple[str, str]]:
        """(local, remote) host of each nominated ICE candidate pair (read from aiortc's internals)."""
        pairs = []
        for t in self.pc.getTransceivers():
            ice = t.sender.transport.transport if t.sender and t.sender.transport else None
            nominated = getattr(getattr(ice, "_connection", None), "_nominated", {}) or {}
            pairs += [(p.local_candidate.host, p.remote_candidate.host) for p in nominated.values()]
        return pairs

    async def close(self) -> None:
        if self._reader is not None:
            self._reader.cancel()
        await self.pc.close()
