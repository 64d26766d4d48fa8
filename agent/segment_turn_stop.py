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

Finished-sentence rule (``finished_text_secs``): ``agent.finished_text_stop``; here it also waits for
every segment's transcript. Minimum quiet before the turn ends (``min_quiet_secs``): ``agent.quiet_turn_stop``.
"""

from __future__ import annotations

from pipecat.frames.frames import Frame, TranscriptionFrame, VADUserStoppedSpeakingFrame
from pipecat.turns.types import ProcessFrameResult
from pipecat.turns.user_stop import TurnAnalyzerUserTurnStopStrategy

from agent.finished_text_stop import FinishedTextStopMixin
from agent.quiet_turn_stop import QuietTurnEndMixin


class SegmentedTurnAnalyzerStopStrategy(FinishedTextStopMixin, TurnAnalyzerUserTurnStopStrategy):
    """``TurnAnalyzerUserTurnStopStrategy`` that waits for the last segment's transcript."""

    def __init__(self, **kwargs):
        """``finished_text_secs`` (keyword): see ``agent.finished_text_stop``."""
        super().__init__(**kwargs)
        self._segments = 0
        self._transcripts = 0

    @property
    def pending_segments(self) -> int:
        """Segments of this turn whose transcript has not arrived yet."""
        return max(0, self._segments + int(self._vad_user_speaking) - self._transcripts)

    async def _reset(self):
        self._segments = 0
        self._transcripts = 0
        await super()._reset()

    def _text_end_blocked(self) -> bool:
        return bool(self.pending_segments)

    async def process_frame(self, frame: Frame) -> ProcessFrameResult:
        if isinstance(frame, VADUserStoppedSpeakingFrame):
            self._segments += 1
        elif isinstance(frame, TranscriptionFrame):
            self._transcripts += 1
            if not frame.text.strip():
                await self._maybe_trigger_user_turn_stopped()  # that was the last pending segment
                await self._end_if_no_words()  # ... and the turn heard no words at all
                return ProcessFrameResult.CONTINUE
        return await super().process_frame(frame)

    async def _maybe_trigger_user_turn_stopped(self):
        if self.pending_segments:
            return  # a segment's words are on their way; its transcript re-checks
        await super()._maybe_trigger_user_turn_stopped()


class QuietSegmentedTurnAnalyzerStopStrategy(QuietTurnEndMixin, SegmentedTurnAnalyzerStopStrategy):
    """The segmented end of turn with the minimum quiet (``min_quiet_secs``) and no speculation."""
