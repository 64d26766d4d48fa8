"""A call's lifecycle around the answers: greeting, idle prompts, hang-up from a tool, transcript end.

``CallControl`` is the ``agent.tools.Call`` a tool receives: ``await call.hang_up()`` says the
goodbye and ends the call gracefully (pipecat ``EndWorkerFrame``: queued audio is played out
first; the phone transport then drains its line and closes the media stream). ``install``
wires a worker: the greeting when the pipeline starts, the idle prompt when the caller stays
silent ``idle_after_s`` after the bot spoke (pipecat's user-idle controller), hang-up after
``idle_prompts`` unanswered prompts, and the transcript's end when the pipeline finishes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from loguru import logger
from pipecat.frames.frames import CancelFrame, EndWorkerFrame, TTSSpeakFrame
from pipecat.services.llm_service import LLMService

from agent.config import CallConfig
from agent.tool_calls import ToolLog
from agent.transcripts import CallTranscript


class CallControl:
    """One call's handle for tools and lifecycle hooks."""

    def __init__(self, session_id: str, config: CallConfig) -> None:
        self.session_id = session_id
        self.config = config
        self.llm: LLMService | None = None
        self.ended_by: str | None = None
        self.idle_prompts = 0
        self.tool_log = ToolLog()

    async def hang_up(self, goodbye: str | None = None) -> None:
        """Say ``goodbye`` (``call.goodbye`` when None, nothing when empty), then end the call."""
        if self.llm is None or self.ended_by is not None:
            return
        self.ended_by = "the bot hung up"
        text = self.config.goodbye if goodbye is None else goodbye
        logger.info(f"session {self.session_id}: hanging up")
        if text:
            await self.llm.push_frame(TTSSpeakFrame(text, append_to_context=False))
        await self.llm.push_frame(EndWorkerFrame(reason=self.ended_by))


def install(worker: Any, user_aggregator: Any, control: CallControl, transcript: CallTranscript | None,
            ended_by: Callable[[], str | None] | None = None) -> None:
    """Greeting, idle prompts and the transcript's end on this call's worker (``ended_by``: the
    session's own reason, e.g. a limit its watchdog hit)."""
    cfg = control.config

    @worker.event_handler("on_pipeline_started")
    async def _greet(_worker: Any, *_args: Any) -> None:
        if cfg.greeting:
            await worker.queue_frames([TTSSpeakFrame(cfg.greeting)])

    @user_aggregator.event_handler("on_user_turn_started")
    async def _caller_spoke(*_args: Any) -> None:
        control.idle_prompts = 0

    @user_aggregator.event_handler("on_user_turn_idle")
    async def _idle(*_args: Any) -> None:
        if control.idle_prompts >= cfg.idle_prompts:
            await control.hang_up()
            control.ended_by = "the caller stayed silent"
            return
        control.idle_prompts += 1
        await user_aggregator.push_frame(TTSSpeakFrame(cfg.idle_prompt))

    @worker.event_handler("on_pipeline_finished")
    async def _finished(_worker: Any, frame: Any = None) -> None:
        if transcript is not None:
            default = "the caller hung up" if isinstance(frame, CancelFrame) else "ended"
            transcript.finish(control.ended_by or (ended_by() if ended_by else None) or default)
