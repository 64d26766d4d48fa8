"""pipecat's VADProcessor, reporting how late it hears the caller.

A transport that stamps each input frame with its arrival (``frame.metadata[ARRIVED]``, ``time.monotonic()``:
the phone input does) gets, every ``every``-th frame, the time from that arrival to the moment the VAD has
analyzed the frame: the pipeline's input queue plus the VAD itself. The server's stage clocks start at the VAD's
end of speech, so a backlog here is invisible to them while the caller waits for it (runs 60-62: at 128 callers
a third of the turns took over 1.5 s at the caller with the server's first-audio p99 at 1.3-2.0 s).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from pipecat.frames.frames import Frame, InputAudioRawFrame
from pipecat.processors.audio.vad_processor import VADProcessor
from pipecat.processors.frame_processor import FrameDirection

from transports import ARRIVED


class TimedVADProcessor(VADProcessor):
    """``VADProcessor`` that calls ``on_lag(ms)`` for every ``every``-th stamped audio frame it analyzed."""

    def __init__(self, *, on_lag: Callable[[float], None], every: int = 5, **kwargs: Any):
        super().__init__(**kwargs)
        self._on_lag = on_lag
        self._every = max(1, every)
        self._seen = 0

    async def process_frame(self, frame: Frame, direction: FrameDirection):
        await super().process_frame(frame, direction)  # forwards the frame, then runs the VAD on it
        if isinstance(frame, InputAudioRawFrame):
            arrived = frame.metadata.get(ARRIVED)
            if arrived is not None:
                self._seen += 1
                if self._seen % self._every == 0:
                    self._on_lag((time.monotonic() - arrived) * 1000.0)
