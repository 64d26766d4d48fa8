"""The contract between the offline pipeline and an ASR engine, and the spec that names one.

``engine_factory.make_engine`` builds the engine a spec names (the engines import this module;
this module imports none of them).

An engine transcribes a batch of windows (mono float32 at ``sample_rate``, each at most
``plan.max_window_s`` long) and returns, per window, its words with times relative to the
window's first sample. It is called from one thread at a time (the batcher's).

An engine that runs asynchronously on a GPU may also be a ``PipelinedEngine``: the batcher then
hands it the next batch while it decodes this one (``asr.offline.window_batcher``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from asr.offline.plan import PlanOptions, plan_options
from asr.offline.results import Word


class WindowEngine(Protocol):
    name: str  # the model id the server answers to
    sample_rate: int
    plan: PlanOptions
    max_batch: int  # engine inputs per call
    languages: frozenset[str] | None  # None: any language the model detects

    def transcribe_windows(self, windows: list[np.ndarray], language: str | None) -> list[list[Word]]: ...


class PipelinedEngine(WindowEngine, Protocol):
    """``transcribe_windows`` split in three: ``launch_windows`` enqueues a batch and returns its ticket at
    once, ``wait_encoded`` blocks until only the batch's decoding is left, ``finish_windows`` gives its words.
    ``pipelined`` is False where launching computes everything (a CPU engine): the batcher then finishes each
    batch before it starts the next."""

    pipelined: bool

    def launch_windows(self, windows: list[np.ndarray], language: str | None) -> Any: ...

    def wait_encoded(self, ticket: Any) -> None: ...

    def finish_windows(self, ticket: Any) -> list[list[Word]]: ...


@dataclass(frozen=True)
class EngineSpec:
    """What ``cadence transcribe-server`` and the Ray job need to build an engine (picklable)."""

    engine: str = "whisper"  # whisper | parakeet
    model: str = ""  # whisper: CTranslate2 dir; parakeet: checkpoint dir (the runtime fills in embedded models)
    name: str = ""  # the model id the server answers to; empty: from the model path
    device: str = "cpu"
    compute_type: str = "int8"  # whisper only
    dtype: str = "float32"  # parakeet only
    encoder_backend: str = "eager"  # parakeet, general backend only
    parakeet_backend: str = "auto"  # fast (profiled GPU encoder + graph decoder) | general | auto: fast on CUDA
    profiles: str = ""  # parakeet fast backend: encoder shape profiles (``name=BATCHxFRAMES,...``; empty: default)
    max_batch: int = 0  # 0: the engine's default
    max_window_s: float = 0.0  # 0: the engine's default
    overlap_s: float | None = None  # audio shared by two windows cut inside speech; None: the planner's default


PARAKEET_BACKENDS = ("auto", "fast", "general")


def parakeet_backend(spec: EngineSpec) -> str:
    """``fast`` or ``general``: what ``spec.parakeet_backend`` means on ``spec.device`` (auto: fast on CUDA)."""
    backend = spec.parakeet_backend.strip().lower() or "auto"
    if backend not in PARAKEET_BACKENDS:
        raise ValueError(f"unknown parakeet backend {spec.parakeet_backend!r}: expected {', '.join(PARAKEET_BACKENDS)}")
    if backend == "auto":
        return "fast" if spec.device.startswith("cuda") else "general"
    return backend


def spec_plan(spec: EngineSpec, default_window_s: float, longest_s: float | None = None) -> PlanOptions:
    """The window plan ``spec`` asks for: its window length (else the engine's, capped at ``longest_s``)."""
    window_s = spec.max_window_s or default_window_s
    if longest_s is not None:
        window_s = min(window_s, longest_s)
    return plan_options(window_s, spec.overlap_s)
