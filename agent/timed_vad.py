"""pipecat's VADProcessor, reporting how late it hears the caller.

A transport that stamps each input frame with its arrival (``frame.metadata[ARRIVED]``, ``time.monotonic()``:
the phone input does) gets, every ``every``-th frame, the time from that arrival to the moment the VAD has
analyzed the frame: the pipeline's input queue plus the VAD itself. The server's stage clocks start at the VAD's
end of speech, so a backlog here is invisible to them while the caller waits for it (runs 60-62: at 128 callers
a third of the turns took over 1.5 s at the caller with the server's first-audio p99 at 1.3-2.0 s).

With ``pause_frames`` it also pushes a ``CallerPauseFrame`` where the VAD starts counting its stop window (its
analyzer goes from speaking to stopping) and, if the caller speaks again before the window runs out, where it
goes back: pipecat's own frames say only that speech started or stopped.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from pipecat.audio.vad.vad_analyzer import VADAnalyzer, VADState
from pipecat.frames.frames import Frame, InputAudioRawFrame
from pipecat.processors.audio.vad_processor import VADProcessor
from pipecat.processors.frame_processor import FrameDirection

from asr.pause import CallerPauseFrame
from transports import ARRIVED


class TimedVADProcessor(VADProcessor):
    """``VADProcessor`` that calls ``on_lag(ms)`` for every ``every``-th stamped audio frame it analyzed."""

    def __init__(self, *, vad_analyzer: VADAnalyzer, on_lag: Callable[[float], None], every: int = 5,
                 pause_frames: bool = False, **kwargs: Any):
        super().__init__(vad_analyzer=vad_analyzer, **kwargs)
        self._analyzer = vad_analyzer
        self._on_lag = on_lag
        self._every = max(1, every)
        self._seen = 0
        self._pause_frames = pause_frames
        self._pausing = False

    async def process_frame(self, frame: Frame, direction: FrameDirection):
        await super().process_frame(frame, direction)  # forwards the frame, then runs the VAD on it
        if isinstance(frame, InputAudioRawFrame):
            if self._pause_frames:
                await self._follow_pause()
            arrived = frame.metadata.get(ARRIVED)
            if arrived is not None:
                self._seen += 1
                if self._seen % self._every == 0:
                    self._on_lag((time.monotonic() - arrived) * 1000.0)

    async def _follow_pause(self) -> None:
        """A ``CallerPauseFrame`` where the analyzer's state (pipecat's ``VADAnalyzer._vad_state``, which keeps the
        stopping state its controller does not report) enters or leaves its stop window."""
        state = self._analyzer._vad_state
        if state == VADState.STOPPING and not self._pausing:
            self._pausing = True
            await self.push_frame(CallerPauseFrame(quiet=True))
        elif state != VADState.STOPPING and self._pausing:
            self._pausing = False
            if state == VADState.SPEAKING:  # back before the stop; a stop is the VAD's own frame
                await self.push_frame(CallerPauseFrame(quiet=False))
