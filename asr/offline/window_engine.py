"""The contract between the offline pipeline and an ASR engine, and how engines are made.

An engine transcribes a batch of windows (mono float32 at ``sample_rate``, each at most
``plan.max_window_s`` long) and returns, per window, its words with times relative to the
window's first sample. It is called from one thread at a time (the batcher's). An engine
that pads every input to a fixed length says so in ``fixed_window_s``, and the batcher then
packs short windows of several requests into one input.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np

from asr.offline.plan import PlanOptions
from asr.offline.results import Word


class WindowEngine(Protocol):
    name: str  # the model id the server answers to
    sample_rate: int
    plan: PlanOptions
    max_batch: int  # engine inputs per call
    fixed_window_s: float | None  # the engine pads every input to this length: pack short windows
    languages: frozenset[str] | None  # None: any language the model detects

    def transcribe_windows(self, windows: list[np.ndarray], language: str | None) -> list[list[Word]]: ...


@dataclass(frozen=True)
class EngineSpec:
    """What ``cadence transcribe-server`` and the Ray job need to build an engine (picklable)."""

    engine: str = "whisper"  # whisper | parakeet
    model: str = ""  # whisper: CTranslate2 dir (empty: embedded tiny.en); parakeet: checkpoint dir
    device: str = "cpu"
    compute_type: str = "int8"  # whisper only
    dtype: str = "float32"  # parakeet only
    encoder_backend: str = "eager"  # parakeet, general backend only
    parakeet_backend: str = "auto"  # fast (profiled GPU encoder + graph decoder) | general | auto: fast on CUDA
    profiles: str = ""  # parakeet fast backend: encoder shape profiles (``name=BATCHxFRAMES,...``; empty: default)
    max_batch: int = 0  # 0: the engine's default
    max_window_s: float = 0.0  # 0: the engine's default
    pack: bool = False  # fixed-length engines: pack windows of several requests into one input (opt-in)


def make_engine(spec: EngineSpec) -> WindowEngine:
    """Build the engine ``spec`` names; heavy libraries are imported here, not before."""
    if spec.engine == "whisper":
        from asr.offline.whisper_engine import WhisperWindowEngine

        return WhisperWindowEngine.load(spec)
    if spec.engine == "parakeet":
        if parakeet_backend(spec) == "fast":
            from asr.offline.parakeet_fast import FastParakeetWindowEngine

            return FastParakeetWindowEngine.load(spec)
        from asr.offline.parakeet_engine import ParakeetWindowEngine

        return ParakeetWindowEngine.load(spec)
    raise ValueError(f"unknown engine {spec.engine!r}: expected whisper or parakeet")


PARAKEET_BACKENDS = ("auto", "fast", "general")


def parakeet_backend(spec: EngineSpec) -> str:
    """``fast`` or ``general``: what ``spec.parakeet_backend`` means on ``spec.device`` (auto: fast on CUDA)."""
    backend = spec.parakeet_backend.strip().lower() or "auto"
    if backend not in PARAKEET_BACKENDS:
        raise ValueError(f"unknown parakeet backend {spec.parakeet_backend!r}: expected {', '.join(PARAKEET_BACKENDS)}")
    if backend == "auto":
        return "fast" if spec.device.startswith("cuda") else "general"
    return backend
