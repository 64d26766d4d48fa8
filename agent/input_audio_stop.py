"""Stop the caller's audio frames where the last stage that reads them has had them.

pipecat hands every frame to every processor downstream, so a caller's 20 ms ``InputAudioRawFrame`` also
travels through the LLM, the TTS, the output transport and the assistant aggregator, none of which reads it:
each hop is a queue hand-off on the session's event loop. Placed after the user aggregator (whose turn
strategies are the last readers: smart-turn, the quiet-turn stop), this drops them; everything else passes.
"""

from __future__ import annotations

from pipecat.frames.frames import Frame, InputAudioRawFrame
from pipecat.processors.frame_processor import FrameDirection, FrameProcessor


class InputAudioStop(FrameProcessor):
    """Drops downstream ``InputAudioRawFrame``s; passes every other frame unchanged."""

    async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
        await super().process_frame(frame, direction)
        if direction == FrameDirection.DOWNSTREAM and isinstance(frame, InputAudioRawFrame):
            return
        await self.push_frame(frame, direction)
