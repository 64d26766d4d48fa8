"""What ended each caller turn, counted over every call of a process (``cadence_turn_ends_total{by}``).

- ``model``: the turn model (smart-turn) judged the segment complete at the VAD stop;
- ``silence``: it judged it unfinished and the caller stayed quiet for the analyzer's ``stop_secs``
  (``vad.turn_fallback_secs``): those turns wait that long whatever the machine does, so their share sets a
  floor under the first-audio tail;
- ``finished_text``: unfinished for the model, but the newest final transcript reads as a finished sentence
  (``agent.finished_text_stop``);
- ``no_words``: the segment's final transcript came back empty with no words before it in the turn: ended at
  once, nothing sent to the LLM (``agent.finished_text_stop``);
- ``timeout``: no stop strategy ended it and pipecat's ``user_turn_stop_timeout`` (5 s after the last VAD event or
  transcript) did (``count_stop_timeouts``). The strategy ends a turn once the analyzer (or its silence fallback)
  says complete and transcript text is in, so such a turn lacked one of them; the strategy logs which
  (``FinishedTextStopMixin.handle_user_turn_stopped``). Run 64 had 3 such turns of ~470, two answered after the
  5 s, one not at all.

The two analyzers of the end of turn (pipecat's ONNX one and the engine-backed one) take ``CountedTurnEnds``
first in their bases; the finished-text rule counts itself.

Per call, ``TurnEndNote`` keeps what ended the latest turn: the stop strategy notes it when it ends the turn,
and the phone line names the reply's marks with it (``r<response>-<by>-<ms>``), so ``cadence capacity`` can tell
the turns that waited the silence fallback from the rest, turn by turn. Where the VAD's silence alone ends turns
(``vad.turn = "silence"``) every reply names ``vad`` (``VadTurnEnds``).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from loguru import logger
from pipecat.audio.turn.base_turn_analyzer import EndOfTurnState
from pipecat.metrics.metrics import MetricsData

TURN_ENDS: Counter[str] = Counter()
BY = ("model", "silence", "finished_text", "no_words", "timeout")
STRATEGY_STATE = ("_text", "_turn_complete", "_vad_user_speaking", "_vad_stopped", "_transcript_finalized",
                  "_timeout_expired")  # what pipecat's TurnAnalyzerUserTurnStopStrategy decides on


def strategy_state(strategy: Any) -> str:
    """The stop strategy's view of the turn when it did not end it (``STRATEGY_STATE``, those it has)."""
    parts = [f"{name.lstrip('_')}={getattr(strategy, name)!r}" for name in STRATEGY_STATE if hasattr(strategy, name)]
    return f"{type(strategy).__name__}(" + ", ".join(parts) + ")"


def count_stop_timeouts(user_aggregator: Any, session_id: str) -> None:
    """Count (``timeout``) and log each turn of this call that pipecat's ``user_turn_stop_timeout`` ended (the stop
    strategy logs what it had seen of it: ``agent.finished_text_stop``)."""

    @user_aggregator.event_handler("on_user_turn_stop_timeout")
    async def _stop_timeout(_aggregator: Any) -> None:
        TURN_ENDS["timeout"] += 1
        logger.info(f"session {session_id}: turn ended by pipecat's user_turn_stop_timeout, not by a stop strategy")


class TurnEndNote:
    """What ended one call's latest turn (one of ``BY``), until a reply takes it."""

    def __init__(self) -> None:
        self.by: str | None = None

    def note(self, by: str | None) -> None:
        self.by = by

    def take(self) -> str | None:
        """The latest turn's end, once: the first reply after the turn end is that turn's answer."""
        by, self.by = self.by, None
        return by


class VadTurnEnds(TurnEndNote):
    """The note of a call whose turns end on the VAD's silence alone (``vad.turn = "silence"``): no turn model
    holds any turn, so every reply names ``vad``."""

    def take(self) -> str | None:
        return "vad"


class CountedTurnEnds:
    """Mixin for a ``BaseSmartTurn``: counts the model's complete verdicts and the silence fallback's ends, and
    keeps which of the two gave the latest complete (``last_complete_by``)."""

    last_complete_by: str | None = None

    def append_audio(self, buffer: bytes, is_speech: bool) -> EndOfTurnState:
        state = super().append_audio(buffer, is_speech)  # type: ignore[misc]
        if state == EndOfTurnState.COMPLETE:
            TURN_ENDS["silence"] += 1
            self.last_complete_by = "silence"
        return state

    async def analyze_end_of_turn(self) -> tuple[EndOfTurnState, MetricsData | None]:
        state, metrics = await super().analyze_end_of_turn()  # type: ignore[misc]
        if state == EndOfTurnState.COMPLETE:
            TURN_ENDS["model"] += 1
            self.last_complete_by = "model"
        return state, metrics
