"""Inbound audio: 8 kHz mu-law -> 16-bit PCM at 8 kHz and at the pipeline's rate.

Per media message: one C call expands mu-law, then one resampling call. To an integer multiple
of 8 kHz (16, 24, 48 kHz) that is a stateful polyphase FIR (one ``np.convolve`` per phase): its
delay is 1.5 ms, where soxr's stream resampler holds back 50-66 ms on 20 ms chunks (measured:
HQ 66 ms, VHQ 52 ms at 8 -> 16 kHz), time every turn would wait for. Other rates use soxr.
Outbound audio needs no code here: the output transport's media sender resamples each TTS frame
to 8 kHz once, and pipecat's ``TwilioFrameSerializer`` turns each 20 ms chunk into ``media``.
"""

from __future__ import annotations

import audioop  # C implementation; pipecat relies on it too (audioop-lts on Python >= 3.13)

import numpy as np
from pipecat.audio.resamplers.soxr_stream_resampler import SOXRStreamAudioResampler

from transports.phone.protocol import SAMPLE_RATE


def lowpass_taps(factor: int, taps_per_phase: int = 24, cutoff_hz: float = 3900.0,
                 in_rate: int = SAMPLE_RATE, beta: float = 6.0) -> np.ndarray:
    """Kaiser-windowed sinc for upsampling by ``factor``; gain ``factor`` so levels are kept."""
    n = factor * taps_per_phase
    out_rate = in_rate * factor
    t = np.arange(n) - (n - 1) / 2.0
    h = np.sinc(2.0 * cutoff_hz / out_rate * t) * np.kaiser(n, beta)
    return (h * factor / h.sum()).astype(np.float32)


class PolyphaseUpsampler:
    """Stateful integer-factor upsampler for 16-bit mono PCM; chunk edges are seamless."""

    def __init__(self, factor: int, taps_per_phase: int = 24):
        self.factor = factor
        h = lowpass_taps(factor, taps_per_phase)
        # Phase p produces output samples p, p+factor, ...: taps h[p], h[p+factor], ...
        self._phases = [h[p::factor] for p in range(factor)]
        self._history = np.zeros(taps_per_phase - 1, dtype=np.float32)

    @property
    def delay_s(self) -> float:
        return (len(self._history) + 1) / 2.0 / SAMPLE_RATE

    def process(self, pcm16: bytes) -> bytes:
        x = np.frombuffer(pcm16, dtype="<i2").astype(np.float32)
        xx = np.concatenate((self._history, x))
        self._history = xx[len(xx) - len(self._history):]
        y = np.empty((len(x), self.factor), dtype=np.float32)
        for p, taps in enumerate(self._phases):
            y[:, p] = np.convolve(xx, taps, mode="valid")
        return np.clip(y.reshape(-1), -32768, 32767).astype("<i2").tobytes()


class InboundDecoder:
    """Decodes each media payload once; keeps the resampler's state for the whole call."""

    def __init__(self, out_rate: int):
        self.out_rate = out_rate
        self._poly: PolyphaseUpsampler | None = None
        self._soxr: SOXRStreamAudioResampler | None = None
        if out_rate != SAMPLE_RATE and out_rate % SAMPLE_RATE == 0:
            self._poly = PolyphaseUpsampler(out_rate // SAMPLE_RATE)
        elif out_rate != SAMPLE_RATE:
            # Never clear the filter state on a pause: phone bridges deliver in bursts.
            self._soxr = SOXRStreamAudioResampler(quality="HQ", clear_after_secs=None)

    async def decode(self, ulaw: bytes) -> tuple[bytes, bytes]:
        """Returns (PCM at 8 kHz, PCM at ``out_rate``)."""
        pcm8k = audioop.ulaw2lin(ulaw, 2)
        if self._poly is not None:
            return pcm8k, self._poly.process(pcm8k)
        if self._soxr is not None:
            return pcm8k, await self._soxr.resample(pcm8k, SAMPLE_RATE, self.out_rate)
        return pcm8k, pcm8k


def encode_ulaw(pcm16: bytes) -> bytes:
    """16-bit PCM at 8 kHz -> mu-law (used by test clients and the example)."""
    return audioop.lin2ulaw(pcm16, 2)


def decode_ulaw(ulaw: bytes) -> bytes:
    return audioop.ulaw2lin(ulaw, 2)
