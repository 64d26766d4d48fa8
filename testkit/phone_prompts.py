"""Asterisk prompts as a phone caller speaks them: 8 kHz 16-bit PCM, and where speech starts."""

from __future__ import annotations

import wave
from functools import cache

import numpy as np

from testkit.corpus import Prompt, pick


@cache
def prompt(name: str) -> Prompt:
    return pick([name])[0]


def pcm8k(name: str) -> bytes:
    with wave.open(str(prompt(name).path)) as w:
        assert w.getframerate() == 8000 and w.getnchannels() == 1 and w.getsampwidth() == 2
        return w.readframes(w.getnframes())


def speech_onset_s(pcm: bytes, threshold: float = 300.0) -> float:
    """Start of the first 20 ms chunk whose RMS exceeds ``threshold`` (the prompts have lead-in silence)."""
    a = np.frombuffer(pcm, "<i2")[: len(pcm) // 320 * 160].reshape(-1, 160).astype(np.float32)
    loud = np.sqrt((a ** 2).mean(axis=1)) > threshold
    return float(np.argmax(loud)) * 0.02


def to_16k(pcm: bytes) -> bytes:
    import soxr

    return soxr.resample(np.frombuffer(pcm, "<i2"), 8000, 16000).astype("<i2").tobytes()
