"""``MoonshineSTTService``: pipecat's segmented STT on the process-wide Moonshine model.

Behaves as the Whisper service does (``asr.segmented_stt``): one transcription per VAD segment, in
a worker thread, padded with the same trailing silence (0.5 s cut Moonshine's WER on 60 trimmed
Asterisk prompts from 10.2% to 7.8% at no measurable cost), the optional eager pass, one
``TranscriptionFrame`` per segment. Audio at another pipeline rate is resampled to 16 kHz.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import numpy as np
from pipecat.services.settings import STTSettings
from pipecat.services.stt_service import SegmentedSTTService
from pipecat.utils.tracing.service_decorators import traced_stt

from asr.eager_segment import EagerSegment
from asr.moonshine.model import SAMPLE_RATE, MoonshineModel, shared_moonshine_model
from asr.moonshine.whisper_fallback import WhisperFallback
from asr.options import ASRConfig
from asr.segmented_stt import EagerSegmentedSTT


def pcm16_to_model_rate(pcm: bytes, sample_rate: int) -> np.ndarray:
    """16-bit mono PCM at ``sample_rate`` to float32 at Moonshine's 16 kHz."""
    samples = np.frombuffer(pcm, dtype=np.int16).astype(np.float32) / 32768.0
    if sample_rate == SAMPLE_RATE:
        return samples
    import soxr

    return soxr.resample(samples, sample_rate, SAMPLE_RATE).astype(np.float32, copy=False)  # float32 in, float32 out


class MoonshineSTTService(EagerSegmentedSTT, SegmentedSTTService):
    """Segmented transcription with a (shared) ``MoonshineModel``."""

    def __init__(self, model: MoonshineModel, *, model_name: str = "moonshine-tiny-en", language: str = "en",
                 fallback: WhisperFallback | None = None, **kwargs):
        kwargs.setdefault("settings", STTSettings(model=model_name, language=language))
        super().__init__(**kwargs)
        self._model = model
        self._fallback = fallback

    @property
    def wants_wav_segments(self) -> bool:
        return False  # raw 16-bit PCM

    def can_generate_metrics(self) -> bool:
        return True

    async def _transcribe(self, pcm: bytes) -> str:
        rate, fallback = self.sample_rate, self._fallback
        if fallback is not None:
            return (await asyncio.to_thread(lambda: fallback.transcribe(pcm16_to_model_rate(pcm, rate))))[0]
        return await asyncio.to_thread(lambda: self._model.transcribe(pcm16_to_model_rate(pcm, rate)))

    @traced_stt
    async def _handle_transcription(self, transcript: str, is_final: bool, language: str | None = None):
        """Traced by pipecat (the span closes on the transcript)."""


def whisper_fallback(config: ASRConfig, model: MoonshineModel, whisper_dir: str | None) -> WhisperFallback | None:
    """``asr.fallback``'s second opinion on ``model`` (Whisper from ``whisper_dir``), or None when it is off."""
    if config.fallback in ("", "off", "none"):
        return None
    if config.fallback != "whisper":
        raise ValueError(f"asr.fallback: unknown engine {config.fallback!r} (known: 'whisper'; empty disables)")
    if whisper_dir is None:
        raise ValueError("asr.fallback = 'whisper' needs the Whisper model's folder")
    from asr.whisper_model import shared_whisper_model, transcribe_greedy

    whisper = shared_whisper_model(whisper_dir, "cpu", "int8", config.cpu_threads)
    return WhisperFallback(model, lambda samples: transcribe_greedy(whisper, samples, "en", config.no_speech_prob),
                           config.fallback_below)


def create_moonshine_stt(config: ASRConfig, model_dir: str, whisper_dir: str | None = None,
                         **kwargs) -> MoonshineSTTService:
    """The service on the shared model in ``model_dir`` (the runtime resolves the embedded tiny-en and, for
    ``asr.fallback``, the embedded Whisper tiny.en in ``whisper_dir``)."""
    if config.device != "cpu":
        raise ValueError(f"asr.engine = 'moonshine' runs on the CPU (ONNX Runtime); asr.device is {config.device!r}")
    if config.language.split("-")[0].lower() != "en":
        raise ValueError(f"Moonshine tiny-en transcribes English only; asr.language is {config.language!r}")
    model = shared_moonshine_model(model_dir, config.cpu_threads)
    return MoonshineSTTService(
        model,
        fallback=whisper_fallback(config, model, whisper_dir),
        model_name=f"moonshine-{Path(model_dir).name}",
        eager=EagerSegment(config.eager_quiet_ms) if config.eager_quiet_ms > 0 else None,
        language=config.language,
        ttfs_p99_latency=config.ttfs_p99_s,
        **kwargs,
    )
