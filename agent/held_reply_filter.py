"""What an observer sees of a speculative reply whose audio is held: what the caller gets, when they get it.

With ``llm.speculate_tts`` the LLM and the TTS push a speculative reply while its turn end is unconfirmed, and
``agent.speculative_audio_gate`` holds it from the caller. Fed through ``HeldReplyFilter``, an observer sees
nothing of a reply the gate dropped (its tokens, text and TTS audio are not the bot's answer), and sees a
released reply at its release: each frame pushed before the release counts as pushed at the release, as when
the LLM stage held the text. So a held reply's stage times read: LLM first token and TTS first audio no
earlier than the turn end (audio synthesized during the wait counts as ready at the release), first bot
audio (``BotStartedSpeakingFrame``) when the output transport got it, and no stage is negative.
"""

from __future__ import annotations

from dataclasses import replace

from pipecat.frames.frames import LLMFullResponseStartFrame, SystemFrame
from pipecat.observers.base_observer import FramePushed
from pipecat.processors.frame_processor import FrameDirection
from pipecat.services.llm_service import LLMService
from pipecat.services.tts_service import TTSService

from agent.held_reply import HeldReplyFrame, is_held_reply


def _reply_frame(data: FramePushed) -> bool:
    """A frame of the bot's reply: first pushed downstream by the LLM or the TTS (not a system frame)."""
    return (data.direction == FrameDirection.DOWNSTREAM and not isinstance(data.frame, SystemFrame)
            and isinstance(data.source, (LLMService, TTSService)))


class HeldReplyFilter:
    """Withholds a held reply's frames from an observer until the gate's verdict on it."""

    def __init__(self) -> None:
        self._reply_id: int | None = None  # the held reply's LLMFullResponseStartFrame; None: holding nothing
        self._held: list[FramePushed] = []

    def feed(self, data: FramePushed) -> list[FramePushed]:
        """The pushes the observer should handle now, in order (none while a reply is held)."""
        frame = data.frame
        if isinstance(frame, HeldReplyFrame):
            return self._verdict(frame, data.timestamp)
        if not _reply_frame(data):
            return [data]
        if isinstance(frame, LLMFullResponseStartFrame):  # a new reply: one still held was superseded
            self._reply_id, self._held = (frame.id if is_held_reply(frame) else None), []
        if self._reply_id is None:
            return [data]
        self._held.append(data)
        return []

    def _verdict(self, verdict: HeldReplyFrame, at: int) -> list[FramePushed]:
        if self._reply_id is None or verdict.reply_id not in (None, self._reply_id):
            return []
        held, self._reply_id, self._held = self._held, None, []
        if not verdict.released:
            return []
        return [replace(d, timestamp=max(d.timestamp, at)) for d in held]
