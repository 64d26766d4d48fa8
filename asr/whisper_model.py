"""faster-whisper models shared by the whole process, and the greedy one-utterance decode.

No pipecat here: the streaming service (``asr.whisper_stt``) and the offline window engine
(``asr.offline.whisper_engine``) both load through ``shared_whisper_model``.
"""

from __future__ import annotations

import os
import threading
from typing import Any

import numpy as np

_MODELS: dict[tuple[str, str, str, int], Any] = {}
_LOCK = threading.Lock()


def shared_whisper_model(path: str, device: str, compute_type: str, cpu_threads: int = 2) -> Any:
    """One ``WhisperModel`` per (path, device, compute type, CPU threads) for the whole process."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from faster_whisper import WhisperModel

    key = (path, device, compute_type, cpu_threads)
    with _LOCK:
        if key not in _MODELS:
            _MODELS[key] = WhisperModel(path, device=device, compute_type=compute_type, cpu_threads=cpu_threads)
        return _MODELS[key]


def transcribe_greedy(model: Any, samples: np.ndarray, language: str, no_speech_prob: float) -> str:
    """One short utterance to text; segments Whisper judges as non-speech are dropped."""
    segments, _ = model.transcribe(samples, language=language, beam_size=1, without_timestamps=True,
                                   condition_on_previous_text=False, vad_filter=False)
    return " ".join(s.text.strip() for s in segments if s.no_speech_prob < no_speech_prob).strip()
