"""End a turn the turn analyzer called unfinished when its transcript reads as a finished sentence.

Smart-turn v3 calls some short complete answers unfinished ("Hello.", "Goodbye."; on the 191 recorded
phone prompts of the GPU capacity runs, 6 finished sentences such as "Hello world." and "The conference
is now locked."), and those turns then wait for its whole silence fallback (``vad.turn_fallback_secs``:
0.8 s of quiet counted from the VAD stop). With ``finished_text_secs`` set, a turn whose newest final
transcript reads as a finished sentence (``agent.sentence_end``) ends once the caller has been quiet that
long past the VAD stop instead.

Mixed into a ``TurnAnalyzerUserTurnStopStrategy`` (before it in the bases): the segmented engines' stop
strategy (Whisper, Moonshine) and the streaming one (Parakeet, whose finals carry punctuation).

A turn whose ASR heard no words: pipecat's strategy ends a turn only with transcript text in hand, so a segment
whose final transcript came back empty (a cough, a noise; the random-weight Parakeet of the GPU runs on 0.6-1.3 s
prompts) with nothing heard before it in the turn held the turn open until the user aggregator's
``user_turn_stop_timeout`` (5 s; runs 66-68: each of their 1-3 timeouts a run came 4.9-5.0 s after an empty
final). Such a turn now ends on its empty final (``no_words``); its aggregation is empty, so nothing goes to the
LLM, as after the timeout. An empty final never reaches pipecat's logic, which would take it as the turn's text
and lose the words of an earlier segment of the same turn.
"""

from __future__ import annotations

import asyncio
import time

from loguru import logger
from pipecat.frames.frames import Frame, TranscriptionFrame, VADUserStoppedSpeakingFrame
from pipecat.turns.types import ProcessFrameResult
from pipecat.turns.user_stop import TurnAnalyzerUserTurnStopStrategy

from agent.sentence_end import reads_finished
from agent.turn_ends import TURN_ENDS, TurnEndNote, strategy_state


class FinishedTextStopMixin:
    """The finished-sentence end of turn for a ``TurnAnalyzerUserTurnStopStrategy``."""

    # the call's note of what ended its latest turn (``agent.turn_ends``); set by ``build_worker``
    turn_end_note: TurnEndNote | None = None

    def __init__(self, *, finished_text_secs: float | None = None, **kwargs):
        """``finished_text_secs``: silence past the VAD stop after which a turn whose transcript reads as a
        finished sentence ends although the analyzer judged it unfinished; None: never (stock behaviour)."""
        super().__init__(**kwargs)
        if finished_text_secs is not None and finished_text_secs < 0:
            raise ValueError(f"finished_text_secs must be >= 0 or None, got {finished_text_secs}")
        self._finished_text_secs = finished_text_secs
        self._vad_stop_at: float | None = None  # time.time() of this turn's last VAD stop
        self._finished_task: asyncio.Task | None = None
        self.ended_on_finished_text = 0  # turns this rule ended (tests, diagnosis)
        self.ended_without_words = 0  # turns ended on an empty final with no words before it
        self._ended_this_turn = False
        self._ending_by: str | None = None  # the rule of this class that completed the turn, if one did
        self.unended: list[str] = []  # what it had seen of each turn something else ended (tests, diagnosis)

    def _text_end_blocked(self) -> bool:
        """True while the turn must not end on its text yet (the segmented strategy: a transcript is due)."""
        return False

    async def _cancel_finished_task(self) -> None:
        if self._finished_task:
            await self.task_manager.cancel_task(self._finished_task)
            self._finished_task = None

    async def _discard_pending_end_of_turn(self):
        await self._cancel_finished_task()
        await super()._discard_pending_end_of_turn()

    async def cleanup(self):
        await self._cancel_finished_task()
        await super().cleanup()

    async def trigger_user_turn_finalized(self, *args, **kwargs):
        """Every way the turn ends here comes through this (pipecat's ``trigger_user_turn_stopped`` and a confirmed
        speculation, ``agent.speculative_turn``): note what ended it for the call (``turn_end_note``)."""
        self._ended_this_turn = True
        analyzer = getattr(self, "_turn_analyzer", None)
        by = self._ending_by or getattr(analyzer, "last_complete_by", None)
        self._ending_by = None
        if analyzer is not None and getattr(analyzer, "last_complete_by", None) is not None:
            analyzer.last_complete_by = None  # this turn's verdict: not the next turn's
        if self.turn_end_note is not None:
            self.turn_end_note.note(by)
        await super().trigger_user_turn_finalized(*args, **kwargs)

    async def handle_user_turn_stopped(self):
        """Log what this strategy had seen of a turn after its VAD stop that it did not end (pipecat's
        ``user_turn_stop_timeout`` or the call's end: run 64's three turns that waited 5 s), before the reset."""
        if not self._ended_this_turn and (self._vad_stopped or self._text):
            state = strategy_state(self)
            self.unended.append(state)
            logger.info(f"a turn ended without its stop strategy: {state}")
        self._ended_this_turn = False
        self._ending_by = None
        await super().handle_user_turn_stopped()

    async def _end_if_no_words(self) -> None:
        """End the turn now if its final transcript came back empty and no words came before it (see the module
        docstring); not while the caller speaks, before the VAD stop, or while another segment's text is due."""
        if self._text or self._vad_user_speaking or not self._vad_stopped or self._text_end_blocked():
            return
        self.ended_without_words += 1
        TURN_ENDS["no_words"] += 1
        self._ending_by = "no_words"
        await self._cancel_finished_task()
        await self.trigger_user_turn_stopped()

    async def process_frame(self, frame: Frame) -> ProcessFrameResult:
        if isinstance(frame, TranscriptionFrame) and not frame.text.strip():
            await self._end_if_no_words()
            return ProcessFrameResult.CONTINUE
        if isinstance(frame, VADUserStoppedSpeakingFrame):
            self._vad_stop_at = frame.timestamp
        result = await super().process_frame(frame)
        if isinstance(frame, TranscriptionFrame) and frame.text.strip():
            await self._maybe_end_on_finished_text(frame.text)
        return result

    async def _maybe_end_on_finished_text(self, text: str) -> None:
        """Arm the finished-sentence end when the analyzer is undecided and the caller is quiet."""
        if (self._finished_text_secs is None or self._turn_complete or self._vad_user_speaking
                or self._vad_stop_at is None or self._text_end_blocked() or not reads_finished(text)):
            return
        await self._cancel_finished_task()
        wait = max(0.0, self._vad_stop_at + self._finished_text_secs - time.time())
        self._finished_task = self.task_manager.create_task(self._end_after(wait), f"{self}::finished_text")

    async def _end_after(self, wait: float) -> None:
        try:
            await asyncio.sleep(wait)
        except asyncio.CancelledError:
            return
        finally:
            self._finished_task = None
        if self._turn_complete or self._vad_user_speaking or self._text_end_blocked():
            return
        self.ended_on_finished_text += 1
        TURN_ENDS["finished_text"] += 1
        self._ending_by = "finished_text"
        self._turn_complete = True
        await self._maybe_trigger_user_turn_stopped()


class FinishedTextTurnAnalyzerStopStrategy(FinishedTextStopMixin, TurnAnalyzerUserTurnStopStrategy):
    """Smart-turn end of turn with the finished-sentence rule (a streaming ASR, no speculation)."""
