"""Between the TTS and the output transport: a speculative reply's audio waits for its turn end.

The reply (marked by the LLM stage, ``agent.held_reply``) is synthesized while the turn end is still being
confirmed (``vad.turn_min_quiet_secs``, smart-turn's wait); everything the TTS makes of it is held here, so the
caller hears nothing, the output transport does not call the bot speaking and the assistant context gets
nothing, until:

- ``UserStoppedSpeakingFrame``: the turn ended on the text the reply answers (a turn ended otherwise is
  preceded by a withdrawal): the held frames go out at once, in order;
- ``EagerEndOfTurnCancelFrame`` (the caller went on, or the final text differs) or ``InterruptionFrame``: they
  are dropped. The TTS cancels the synthesis itself (``CadenceTTSService(withdraw_on_cancel=True)``), and what
  it pushed that still waits in this stage's queue goes too, as on an interruption.

A marked reply that reaches the gate after its turn already ended is not held. Each decision is pushed on as a
``HeldReplyFrame`` for the observers. Unlike pipecat's ``SpeculationGate`` this does not drop a withdrawn
reply's tail until its ``LLMFullResponseEndFrame``: the interrupted TTS sends no tail, nor that end frame.
"""

from __future__ import annotations

import asyncio
from typing import Any

from loguru import logger
from pipecat.frames.frames import (
    EagerEndOfTurnCancelFrame,
    EndFrame,
    Frame,
    InterruptionFrame,
    LLMFullResponseStartFrame,
    SystemFrame,
    UserStartedSpeakingFrame,
    UserStoppedSpeakingFrame,
)
from pipecat.processors.frame_processor import FrameDirection, FrameProcessor

from agent.held_reply import HeldReplyFrame, is_held_reply

Routed = list[tuple[Frame, FrameDirection]]
DOWN = FrameDirection.DOWNSTREAM


class SpeculativeAudioGate(FrameProcessor):
    """Holds a speculative reply's TTS output until its turn end confirms it; drops it if withdrawn."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._held: Routed | None = None  # None: not holding
        self._held_id: int | None = None
        self._turn_ended = False
        # One decision at a time: a release pushed from the input task must not interleave with the next frame
        # the process task lets through.
        self._lock = asyncio.Lock()
        self.released = 0
        self.dropped = 0

    @property
    def holding(self) -> bool:
        return self._held is not None

    async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
        await super().process_frame(frame, direction)  # an InterruptionFrame empties this stage's queue
        if isinstance(frame, EagerEndOfTurnCancelFrame) and direction == DOWN:
            await self._start_interruption()  # so does a withdrawal: what waits there is the withdrawn reply
        async with self._lock:
            for out, out_direction in self._route(frame, direction):
                await self.push_frame(out, out_direction)

    def _route(self, frame: Frame, direction: FrameDirection) -> Routed:
        if direction != DOWN:
            return [(frame, direction)]
        if isinstance(frame, UserStartedSpeakingFrame):
            self._turn_ended = False
        elif isinstance(frame, UserStoppedSpeakingFrame):
            self._turn_ended = True
            return [(frame, direction), *self._release()]
        elif isinstance(frame, (EagerEndOfTurnCancelFrame, InterruptionFrame)):
            return [(frame, direction), *self._drop(None)]
        elif isinstance(frame, EndFrame):
            return [*self._drop(self._held_id), (frame, direction)]
        if isinstance(frame, SystemFrame):
            return [(frame, direction)]
        out: Routed = []
        if isinstance(frame, LLMFullResponseStartFrame):
            if self._held is not None:  # a new reply supersedes the held one
                out += self._drop(self._held_id)
            if is_held_reply(frame):
                if self._turn_ended:  # confirmed before it got here
                    out.append((HeldReplyFrame(reply_id=frame.id, released=True), DOWN))
                else:
                    self._held, self._held_id = [], frame.id
        if self._held is not None:
            self._held.append((frame, direction))
            return out
        return [*out, (frame, direction)]

    def _release(self) -> Routed:
        if self._held is None:
            return []
        held, reply_id = self._held, self._held_id
        self._held, self._held_id = None, None
        self.released += 1
        logger.debug(f"{self}: turn confirmed: releasing the speculative reply ({len(held)} frames)")
        return [(HeldReplyFrame(reply_id=reply_id, released=True), DOWN), *held]

    def _drop(self, reply_id: int | None) -> Routed:
        """Drop the held reply (keeping uninterruptible frames); the verdict goes out even if none is held."""
        verdict: Routed = [(HeldReplyFrame(reply_id=reply_id, released=False), DOWN)]
        if self._held is None:
            return verdict
        held = self._held
        self._held, self._held_id = None, None
        self.dropped += 1
        logger.debug(f"{self}: speculative reply withdrawn: {len(held)} held frames dropped")
        return verdict + [(f, d) for f, d in held if not f.interruptible]
