"""End the caller's turn only once every speech segment in it has its transcript.

A segmented ASR (Whisper) transcribes each VAD segment after its VAD stop. When a caller pauses
mid-turn ("eight of spades, ... four of clubs"), the first segment's transcript often lands
while the second is being spoken. Stock ``TurnAnalyzerUserTurnStopStrategy`` then ends the turn
as soon as the turn analyzer calls it complete after the second segment, with the first
segment's text in hand (its "finalized" mark, or the STT safety-net timeout on a slow pass):
the LLM gets only the first segment and the second transcript arrives after the request (lost
words, and a negative transcript -> LLM time).

Here the turn ends only when every segment of the turn (VAD stops since the turn started, plus
the one being spoken) has its transcript. It relies on the ASR pushing exactly one
``TranscriptionFrame`` per VAD segment, an empty one when there were no words
(``asr.whisper_stt`` does, failures included); empty frames never reach the stock logic, so
they cannot wipe the text already heard.

Finished-sentence rule (``finished_text_secs``): when the turn analyzer judged the turn unfinished
but the last segment's transcript reads as a finished sentence (``agent.sentence_end``), the turn
ends once the caller has been quiet ``finished_text_secs`` past the VAD stop, instead of after the
analyzer's whole silence fallback. Short complete answers ("Hello.", "Goodbye.") are what smart-turn
most often calls unfinished.
"""

from __future__ import annotations

import asyncio
import time

from pipecat.frames.frames import Frame, TranscriptionFrame, VADUserStoppedSpeakingFrame
from pipecat.turns.types import ProcessFrameResult
from pipecat.turns.user_stop import TurnAnalyzerUserTurnStopStrategy

from agent.sentence_end import reads_finished


class SegmentedTurnAnalyzerStopStrategy(TurnAnalyzerUserTurnStopStrategy):
    """``TurnAnalyzerUserTurnStopStrategy`` that waits for the last segment's transcript."""

    def __init__(self, *, finished_text_secs: float | None = None, **kwargs):
        """``finished_text_secs``: silence past the VAD stop after which a turn whose transcript reads as a
        finished sentence ends although the analyzer judged it unfinished; None: never (stock behaviour)."""
        super().__init__(**kwargs)
        if finished_text_secs is not None and finished_text_secs < 0:
            raise ValueError(f"finished_text_secs must be >= 0 or None, got {finished_text_secs}")
        self._finished_text_secs = finished_text_secs
        self._segments = 0
        self._transcripts = 0
        self._vad_stop_at: float | None = None  # time.time() of this turn's last VAD stop
        self._finished_task: asyncio.Task | None = None
        self.ended_on_finished_text = 0  # turns this rule ended (tests, diagnosis)

    @property
    def pending_segments(self) -> int:
        """Segments of this turn whose transcript has not arrived yet."""
        return max(0, self._segments + int(self._vad_user_speaking) - self._transcripts)

    async def _reset(self):
        self._segments = 0
        self._transcripts = 0
        await super()._reset()

    async def _discard_pending_end_of_turn(self):
        if self._finished_task:
            await self.task_manager.cancel_task(self._finished_task)
            self._finished_task = None
        await super()._discard_pending_end_of_turn()

    async def cleanup(self):
        if self._finished_task:
            await self.task_manager.cancel_task(self._finished_task)
            self._finished_task = None
        await super().cleanup()

    async def process_frame(self, frame: Frame) -> ProcessFrameResult:
        if isinstance(frame, VADUserStoppedSpeakingFrame):
            self._segments += 1
            self._vad_stop_at = frame.timestamp
        elif isinstance(frame, TranscriptionFrame):
            self._transcripts += 1
            if not frame.text.strip():
                await self._maybe_trigger_user_turn_stopped()  # that was the last pending segment
                return ProcessFrameResult.CONTINUE
        result = await super().process_frame(frame)
        if isinstance(frame, TranscriptionFrame):
            await self._maybe_end_on_finished_text(frame.text)
        return result

    async def _maybe_end_on_finished_text(self, text: str) -> None:
        """Arm the finished-sentence end when the analyzer is undecided and every segment is in."""
        if (self._finished_text_secs is None or self._turn_complete or self._vad_user_speaking
                or self._vad_stop_at is None or self.pending_segments or not reads_finished(text)):
            return
        if self._finished_task:
            await self.task_manager.cancel_task(self._finished_task)
        wait = max(0.0, self._vad_stop_at + self._finished_text_secs - time.time())
        self._finished_task = self.task_manager.create_task(self._end_after(wait), f"{self}::finished_text")

    async def _end_after(self, wait: float) -> None:
        try:
            await asyncio.sleep(wait)
        except asyncio.CancelledError:
            return
        finally:
            self._finished_task = None
        if self._turn_complete or self._vad_user_speaking or self.pending_segments:
            return
        self.ended_on_finished_text += 1
        self._turn_complete = True
        await self._maybe_trigger_user_turn_stopped()

    async def _maybe_trigger_user_turn_stopped(self):
        if self.pending_segments:
            return  # a segment's words are on their way; its transcript re-checks
        await super()._maybe_trigger_user_turn_stopped()
