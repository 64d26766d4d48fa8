"""Parakeet-TDT as an offline window engine (``asr.parakeet.ParakeetEngine``, plain torch).

Windows go to the engine as one batch; its token timestamps, grouped into words, come back
relative to each window. Imports nothing of pipecat, so it runs on a bare GPU machine.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any

import numpy as np

from asr.offline.plan import PlanOptions
from asr.offline.results import Word
from asr.offline.window_engine import EngineSpec, spec_plan


def offline_words(words: Iterable[Any]) -> list[Word]:
    """Parakeet words (``asr.parakeet.tokenizer.Word``) as offline words, each with its leading space."""
    return [Word(float(w.start), float(w.end), " " + w.text) for w in words]


class ParakeetWindowEngine:
    languages = None  # v3 detects among its languages; v2 is English and ignores the hint

    def __init__(self, engine: Any, name: str, max_batch: int, plan: PlanOptions) -> None:
        self.engine = engine
        self.name = name
        self.sample_rate = int(engine.sample_rate)
        self.max_batch = max_batch
        self.plan = plan

    @classmethod
    def load(cls, spec: EngineSpec) -> ParakeetWindowEngine:
        if not spec.model:
            raise ValueError("the parakeet engine needs --model: a checkpoint folder, .nemo file or Hub id")
        from asr.parakeet import ParakeetEngine

        engine = ParakeetEngine.from_pretrained(spec.model, device=spec.device, dtype=spec.dtype,
                                                encoder_backend=spec.encoder_backend)
        engine.warmup()
        base = spec.name or os.path.basename(os.path.normpath(spec.model)).removesuffix(".nemo")
        max_batch = spec.max_batch or (64 if spec.device.startswith("cuda") else 8)
        return cls(engine, base or "parakeet-tdt", max_batch, spec_plan(spec, 30.0))

    def transcribe_windows(self, windows: list[np.ndarray], language: str | None) -> list[list[Word]]:
        if not windows:
            return []
        results = self.engine.transcribe(windows, batch_size=len(windows))
        return [offline_words(r.words) for r in results]
