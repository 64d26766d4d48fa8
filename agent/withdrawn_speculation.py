"""A speculative reply withdrawn before, or while, the LLM stage answers it never reaches the caller.

The stop strategy withdraws a speculation with ``EagerEndOfTurnCancelFrame``, a system frame that overtakes the
speculative ``LLMContextFrame`` still queued at the LLM stage. pipecat's LLM service ignores a cancel while it is not
yet speculating, so that queued request would run afterwards as an orphan reply, and the audio gate releases a reply
that reaches it after its turn ended: runs 78, 83 and 84 answered turns twice at 256 callers with ``llm.speculate``'s
``quiet`` trigger, whose withdrawals come right after the request.

pipecat's user aggregator pushes the speculative context frame with ``speculation=True``, not the speculation
itself, so ``agent.user_aggregator.CadenceUserAggregator`` attaches the ``UserTurnSpeculation`` it answers
(``attach``). The strategy marks what it withdraws (``mark_withdrawn``), and the LLM stage drops a context frame whose
speculation is marked, and the rest of a reply whose speculation is marked while it streams.
"""

from __future__ import annotations

WITHDRAWN = "_cadence_withdrawn"
ANSWERS = "cadence_speculation"  # on a speculative LLMContextFrame: the UserTurnSpeculation it answers


def mark_withdrawn(speculation: object) -> None:
    """``speculation`` (pipecat's ``UserTurnSpeculation``) will not be answered: drop its request and reply."""
    setattr(speculation, WITHDRAWN, True)


def is_withdrawn(speculation: object | None) -> bool:
    return speculation is not None and bool(getattr(speculation, WITHDRAWN, False))


def attach(frame: object, speculation: object) -> None:
    """``frame`` (a speculative ``LLMContextFrame``) answers ``speculation``."""
    setattr(frame, ANSWERS, speculation)


def speculation_of(frame: object) -> object | None:
    """The speculation a context frame answers; None for a turn's own request."""
    return getattr(frame, ANSWERS, None)
