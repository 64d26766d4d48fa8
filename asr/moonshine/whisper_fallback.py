"""Moonshine first; Whisper for the utterances Moonshine is unsure of (``asr.fallback = "whisper"``).

On this 2-core box Moonshine tiny-en transcribes a caller's turn in ~0.1 s where Whisper tiny.en
takes ~0.55 s (it always encodes a padded 30 s window), but Moonshine makes more errors. Its own
confidence tells them apart: the lowest softmax probability of any token it chose. Over 545 recorded
Asterisk prompts with 0.5 s of quiet around each (``bench/asr_fallback_sweep.py``,
bench/results/asr_fallback_sweep.json), sending the turns whose lowest probability is under 0.55 (39%)
to Whisper gave 7.9% WER against Whisper alone 8.4% and Moonshine alone 10.5%; over the 250 prompts
longer than 1.5 s (sentences) 4.10% against Whisper's 4.05%. So three turns in five get Moonshine's
speed (~0.09 s a clip against ~0.8 s) and no words are traded for it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from asr.moonshine.model import MoonshineModel

DEFAULT_BELOW = 0.55


@dataclass
class FallbackCounts:
    """Which engine gave each transcript, over every caller of the process."""

    moonshine: int = 0
    whisper: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add(self, engine: str) -> None:
        with self._lock:
            setattr(self, engine, getattr(self, engine) + 1)


TOTALS = FallbackCounts()  # the process's (``/metrics``: cadence_asr_transcripts{engine})


class WhisperFallback:
    """``transcribe(samples)``: Moonshine's text, or Whisper's where Moonshine's decode was unsure."""

    def __init__(self, moonshine: MoonshineModel, whisper: Callable[[np.ndarray], str],
                 below: float = DEFAULT_BELOW, counts: FallbackCounts | None = None):
        if not 0.0 <= below <= 1.0:
            raise ValueError(f"asr.fallback_below is a probability in [0, 1], got {below}")
        self.moonshine = moonshine
        self.whisper = whisper
        self.below = below
        self.counts = counts if counts is not None else TOTALS

    def transcribe(self, samples: np.ndarray) -> tuple[str, str]:
        """16 kHz mono float audio -> (text, the engine that wrote it: "moonshine" or "whisper")."""
        first = self.moonshine.transcribe_scored(samples)
        engine = "moonshine" if first.stopped and first.min_prob >= self.below else "whisper"
        self.counts.add(engine)
        return (first.text, engine) if engine == "moonshine" else (self.whisper(samples), engine)
