"""A speculative reply synthesized before its turn ends, and held as audio (``llm.speculate_tts``).

Stock pipecat holds a speculative reply's text in the LLM stage (its ``SpeculationGate``) until the turn end
confirms it, so the TTS starts only then. Here the LLM stage lets the reply through to the TTS with its
``LLMFullResponseStartFrame`` marked (``mark_held_reply``), while still tracking the speculation
(``UnheldSpeculationGate``: a withdrawal still stops the request); ``agent.speculative_audio_gate``, after the
TTS, holds what the TTS made of it and says what became of it in a ``HeldReplyFrame``: released at the turn
end, or dropped when the caller went on. Observers read that verdict (``agent.held_reply_filter``).
"""

from __future__ import annotations

from dataclasses import dataclass

from pipecat.frames.frames import Frame, LLMFullResponseStartFrame, SystemFrame
from pipecat.processors.frame_processor import FrameDirection
from pipecat.turns.speculation_gate import GatedFrame, SpeculationGate

HELD_REPLY = "cadence.held_reply"  # Frame.metadata key on a held reply's LLMFullResponseStartFrame


def mark_held_reply(frame: LLMFullResponseStartFrame) -> None:
    """This reply answers a turn not yet confirmed: the audio gate holds it."""
    frame.metadata[HELD_REPLY] = True


def is_held_reply(frame: Frame) -> bool:
    return isinstance(frame, LLMFullResponseStartFrame) and bool(frame.metadata.get(HELD_REPLY))


@dataclass
class HeldReplyFrame(SystemFrame):
    """The audio gate's verdict on a held reply.

    ``reply_id``: the id of the reply's ``LLMFullResponseStartFrame``; None on a withdrawal or an
    interruption, which void whatever is held (a reply the TTS dropped never reached the gate).
    """

    reply_id: int | None = None
    released: bool = False


class UnheldSpeculationGate(SpeculationGate):
    """Pipecat's gate for the LLM stage that tracks the speculation but holds nothing.

    Only system frames (the turn's start and end, withdrawals, interruptions) go through pipecat's logic, which
    keeps ``is_speculating`` right for the LLM service (a withdrawal cancels the request, a speculative tool
    call withdraws it); a response frame is never held, so the gate never leaves its open state.
    """

    def process(self, frame: Frame, direction: FrameDirection) -> list[GatedFrame]:
        if isinstance(frame, SystemFrame):
            return super().process(frame, direction)
        return [(frame, direction)]
