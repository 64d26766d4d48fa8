"""A speculative reply withdrawn before the LLM stage even started it.

The stop strategy withdraws a speculation with ``EagerEndOfTurnCancelFrame``, a system frame that overtakes the
speculative ``LLMContextFrame`` still queued at the LLM stage. pipecat's LLM service ignores a cancel while it is not
yet speculating, so that queued request would run afterwards as an orphan reply, and the audio gate releases a reply
that reaches it after its turn ended: run 78 answered two turns twice at 256 callers with ``llm.speculate``'s
``quiet`` trigger, whose withdrawals come right after the request. The strategy marks the speculation it withdraws,
and the LLM stage drops a context frame that carries a marked one.
"""

from __future__ import annotations

WITHDRAWN = "_cadence_withdrawn"


def mark_withdrawn(speculation: object) -> None:
    """``speculation`` (pipecat's ``UserTurnSpeculation``) will not be answered: drop its request if still queued."""
    setattr(speculation, WITHDRAWN, True)


def is_withdrawn(speculation: object | None) -> bool:
    return speculation is not None and bool(getattr(speculation, WITHDRAWN, False))
