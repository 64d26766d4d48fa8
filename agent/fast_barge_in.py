"""Fast barge-in for any transport: stop the bot as soon as the caller's voice rises over it.

The turn VAD needs ``vad.start_secs`` of confident speech plus its volume smoothing, which puts
a barge-in 250-400 ms after the caller starts talking. While the bot is speaking, this stage
watches the raw input level instead: ``start_ms`` of audio louder than an absolute floor and a
tracked noise floor + ``snr_db`` broadcasts an interruption at once (the output queue is
dropped, LLM and TTS stop). The VAD then opens the caller's turn as usual. The browser's echo
canceller (and a phone line's hybrid) keep the bot's own voice out of this level.
"""

from __future__ import annotations

from pipecat.frames.frames import (
    BotStartedSpeakingFrame,
    BotStoppedSpeakingFrame,
    Frame,
    InputAudioRawFrame,
)
from pipecat.processors.frame_processor import FrameDirection, FrameProcessor

from transports.audio_level import LoudnessGate


class FastBargeIn(FrameProcessor):
    """Energy-onset interruption while the bot speaks; passes every frame through unchanged."""

    def __init__(self, start_ms: float = 60.0, min_level_dbfs: float = -40.0, snr_db: float = 12.0,
                 floor_rise_db_per_s: float = 3.0, **kwargs):
        super().__init__(**kwargs)
        self._start_s = start_ms / 1000.0
        self._gate = LoudnessGate(min_level_dbfs, snr_db, floor_rise_db_per_s)
        self._loud_s = 0.0
        self._bot_speaking = False
        self._fired = False
        self.triggers = 0

    async def process_frame(self, frame: Frame, direction: FrameDirection):
        await super().process_frame(frame, direction)
        if isinstance(frame, BotStartedSpeakingFrame):
            self._bot_speaking, self._fired, self._loud_s = True, False, 0.0
        elif isinstance(frame, BotStoppedSpeakingFrame):
            self._bot_speaking = False
        await self.push_frame(frame, direction)
        if isinstance(frame, InputAudioRawFrame) and frame.audio:
            await self._listen(frame)

    async def _listen(self, frame: InputAudioRawFrame) -> None:
        seconds = len(frame.audio) / 2 / frame.num_channels / frame.sample_rate
        loud = self._gate.loud(frame.audio, seconds)
        self._loud_s = self._loud_s + seconds if loud else 0.0
        if self._bot_speaking and not self._fired and self._loud_s >= self._start_s:
            self._fired = True
            self.triggers += 1
            await self.broadcast_interruption()
