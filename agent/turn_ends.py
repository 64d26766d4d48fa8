"""What ended each caller turn, counted over every call of a process (``cadence_turn_ends_total{by}``).

- ``model``: the turn model (smart-turn) judged the segment complete at the VAD stop;
- ``silence``: it judged it unfinished and the caller stayed quiet for the analyzer's ``stop_secs``
  (``vad.turn_fallback_secs``): those turns wait that long whatever the machine does, so their share sets a
  floor under the first-audio tail;
- ``finished_text``: unfinished for the model, but the newest final transcript reads as a finished sentence
  (``agent.finished_text_stop``);
- ``timeout``: no stop strategy ended it and pipecat's ``user_turn_stop_timeout`` (5 s) did: the turn reached the
  stop strategy with no transcript text (noise, or an ASR that heard no words), so it gets no reply
  (``count_stop_timeouts``; run 64 had 3 such turns of ~470 with random Parakeet weights).

The two analyzers of the end of turn (pipecat's ONNX one and the engine-backed one) take ``CountedTurnEnds``
first in their bases; the finished-text rule counts itself.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from loguru import logger
from pipecat.audio.turn.base_turn_analyzer import EndOfTurnState
from pipecat.metrics.metrics import MetricsData

TURN_ENDS: Counter[str] = Counter()
BY = ("model", "silence", "finished_text", "timeout")


def count_stop_timeouts(user_aggregator: Any, session_id: str) -> None:
    """Count (``timeout``) and log each turn of this call that pipecat's ``user_turn_stop_timeout`` ended."""

    @user_aggregator.event_handler("on_user_turn_stop_timeout")
    async def _stop_timeout(_aggregator: Any) -> None:
        TURN_ENDS["timeout"] += 1
        logger.info(f"session {session_id}: turn ended by pipecat's user_turn_stop_timeout, not by a stop strategy "
                    "(no transcript text reached it)")


class CountedTurnEnds:
    """Mixin for a ``BaseSmartTurn``: counts the model's complete verdicts and the silence fallback's ends."""

    def append_audio(self, buffer: bytes, is_speech: bool) -> EndOfTurnState:
        state = super().append_audio(buffer, is_speech)  # type: ignore[misc]
        if state == EndOfTurnState.COMPLETE:
            TURN_ENDS["silence"] += 1
        return state

    async def analyze_end_of_turn(self) -> tuple[EndOfTurnState, MetricsData | None]:
        state, metrics = await super().analyze_end_of_turn()  # type: ignore[misc]
        if state == EndOfTurnState.COMPLETE:
            TURN_ENDS["model"] += 1
        return state, metrics
