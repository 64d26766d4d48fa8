"""Parakeet-TDT engine: loading, features, encoder backends, label-looping decoder, streaming.

Importing this package is cheap; the heavy modules import torch and transformers themselves.
The main entry points are re-exported lazily::

    from asr.parakeet import ParakeetEngine
    engine = ParakeetEngine.from_pretrained("path/to/checkpoint")
    results = engine.transcribe([audio_16k_float32])
"""

from __future__ import annotations

import importlib
import importlib.util
from typing import Any

from asr.parakeet._deps import EXTRA_HINT

_missing = [m for m in ("torch", "transformers") if importlib.util.find_spec(m) is None]
if _missing:
    raise ImportError(f"the Parakeet engine needs {', '.join(_missing)}: {EXTRA_HINT}")

_LAZY = {
    "ParakeetEngine": "asr.parakeet.engine",
    "TranscriptResult": "asr.parakeet.engine",
    "LabelLoopingDecoder": "asr.parakeet.decoding.label_looping",
    "DecoderState": "asr.parakeet.decoding.label_looping",
    "DecoderCarry": "asr.parakeet.decoding.label_looping",
    "DecodedSeq": "asr.parakeet.decoding.label_looping",
    "load_parakeet": "asr.parakeet.loading",
    "convert_nemo": "asr.parakeet.loading",
    "make_tiny_checkpoint": "asr.parakeet.tiny",
    "make_tiny_nemo": "asr.parakeet.tiny",
    "StreamBatcher": "asr.parakeet.batcher",
}

__all__ = list(_LAZY)


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'asr.parakeet' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
