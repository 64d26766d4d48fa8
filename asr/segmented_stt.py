"""What Cadence's segmented (one pass per VAD segment) CPU ASR services share, whatever the model.

A mixin over pipecat's ``SegmentedSTTService``: each VAD segment is transcribed in a worker thread
(``_transcribe``, the model's part, runs its model through ``asyncio.to_thread``, so the event loop
is never blocked), with an optional speculative pass that starts at the first quiet moment before
the VAD stop (``asr.eager_segment``), and exactly one ``TranscriptionFrame`` per segment, empty
ones and failures included (``agent.segment_turn_stop`` counts on it).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator

from loguru import logger
from pipecat.frames.frames import (
    Frame,
    InputAudioRawFrame,
    TranscriptionFrame,
    VADUserStartedSpeakingFrame,
    VADUserStoppedSpeakingFrame,
)
from pipecat.processors.frame_processor import FrameDirection
from pipecat.utils.time import time_now_iso8601

from asr.eager_segment import EagerSegment


class EagerSegmentedSTT:
    """Mix in before a ``SegmentedSTTService`` subclass; the subclass implements ``_transcribe``."""

    def __init__(self, *, eager: EagerSegment | None = None, **kwargs):
        super().__init__(**kwargs)
        self._eager = eager
        self._eager_task: asyncio.Future | None = None
        self._eager_ready: tuple[bytes, asyncio.Future] | None = None
        self.eager_used = 0
        self.eager_discarded = 0

    async def _transcribe(self, pcm: bytes) -> str:
        """16-bit mono PCM at the service's sample rate to text, off the event loop."""
        raise NotImplementedError

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
        # Padded like the normal pass: a model may drop or garble a last word that ends abruptly.
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
