"""What ended each caller turn, counted over every call of a process (``cadence_turn_ends_total{by}``).

- ``model``: the turn model (smart-turn) judged the segment complete at the VAD stop;
- ``silence``: it judged it unfinished and the caller stayed quiet for the analyzer's ``stop_secs``
  (``vad.turn_fallback_secs``): those turns wait that long whatever the machine does, so their share sets a
  floor under the first-audio tail;
- ``finished_text``: unfinished for the model, but the newest final transcript reads as a finished sentence
  (``agent.finished_text_stop``).

The two analyzers of the end of turn (pipecat's ONNX one and the engine-backed one) take ``CountedTurnEnds``
first in their bases; the finished-text rule counts itself.
"""

from __future__ import annotations

from collections import Counter

from pipecat.audio.turn.base_turn_analyzer import EndOfTurnState
from pipecat.metrics.metrics import MetricsData

TURN_ENDS: Counter[str] = Counter()
BY = ("model", "silence", "finished_text")


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
