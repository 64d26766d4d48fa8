"""The call's context aggregators: pipecat's, with each speculative request naming the speculation it answers.

pipecat's ``LLMUserAggregator`` runs a speculation by pushing ``LLMContextFrame(speculation=True)``; the frame does not
say which ``UserTurnSpeculation`` it answers, so the LLM stage cannot tell a withdrawn one from the one in force
(``agent.withdrawn_speculation``). ``CadenceUserAggregator`` attaches it.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from pipecat.frames.frames import Frame, LLMContextFrame
from pipecat.processors.aggregators.llm_context import LLMContext
from pipecat.processors.aggregators.llm_response_universal import (
    LLMAssistantAggregator,
    LLMAssistantAggregatorParams,
    LLMUserAggregator,
    LLMUserAggregatorParams,
)
from pipecat.processors.frame_processor import FrameDirection
from pipecat.turns.types import UserTurnSpeculation

from agent.withdrawn_speculation import attach


class CadenceUserAggregator(LLMUserAggregator):
    """``LLMUserAggregator`` whose speculative context frames carry their ``UserTurnSpeculation``."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._running: UserTurnSpeculation | None = None  # the speculation whose request is being pushed

    async def _run_speculative_inference(self, speculation: UserTurnSpeculation) -> None:
        self._running = speculation
        try:
            await super()._run_speculative_inference(speculation)
        finally:
            self._running = None

    async def push_frame(self, frame: Frame, direction: FrameDirection = FrameDirection.DOWNSTREAM) -> None:
        if self._running is not None and isinstance(frame, LLMContextFrame) and frame.speculation:
            attach(frame, self._running)
        await super().push_frame(frame, direction)


class CadenceAggregatorPair:
    """The user and assistant aggregators of one call, paired as ``LLMContextAggregatorPair`` pairs them."""

    def __init__(self, context: LLMContext, *, user_params: LLMUserAggregatorParams | None = None) -> None:
        self._user = CadenceUserAggregator(context, params=user_params or LLMUserAggregatorParams())
        self._assistant = LLMAssistantAggregator(context, params=LLMAssistantAggregatorParams(),
                                                 _paired_user_aggregator=self._user)

    def user(self) -> CadenceUserAggregator:
        return self._user

    def assistant(self) -> LLMAssistantAggregator:
        return self._assistant

    def __iter__(self) -> Iterator[LLMUserAggregator | LLMAssistantAggregator]:
        return iter((self._user, self._assistant))
