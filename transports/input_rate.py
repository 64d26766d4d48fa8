"""Caller audio beyond real time is dropped, never queued for the ASR (issue 15: one fast sender closed
the overload gate for every caller for ~47 s).

``RealTimeBudget`` is the token bucket both transports use; ``InputRateLimiter`` is the pipeline stage for
transports without a cap of their own (WebRTC: aiortc hands over RTP as fast as it arrives). The phone
input applies the same bucket itself, before decoding.
"""

from __future__ import annotations

import time

from pipecat.frames.frames import Frame, InputAudioRawFrame
from pipecat.processors.frame_processor import FrameDirection, FrameProcessor


class RealTimeBudget:
    """Token bucket of audio seconds: refills at ``ratio`` x wall time, holds at most ``burst_s``."""

    def __init__(self, ratio: float, burst_s: float, now: float | None = None):
        self.ratio = ratio
        self.burst_s = burst_s
        self.level = burst_s
        self.at = time.monotonic() if now is None else now

    def take(self, seconds: float, now: float) -> bool:
        if self.ratio <= 0:
            return True
        self.level = min(self.burst_s, self.level + (now - self.at) * self.ratio)
        self.at = now
        if self.level < seconds:
            return False
        self.level -= seconds
        return True


class InputRateLimiter(FrameProcessor):
    """Pass caller audio up to ``ratio`` x real time after a ``burst_s`` allowance; drop and count the rest."""

    def __init__(self, ratio: float = 1.5, burst_s: float = 2.0, **kwargs) -> None:
        super().__init__(**kwargs)
        self._budget = RealTimeBudget(ratio, burst_s)
        self.dropped_s = 0.0

    async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
        await super().process_frame(frame, direction)
        if isinstance(frame, InputAudioRawFrame) and direction == FrameDirection.DOWNSTREAM:
            seconds = len(frame.audio) / (2 * frame.num_channels * frame.sample_rate)
            if not self._budget.take(seconds, time.monotonic()):
                self.dropped_s += seconds
                return
        await self.push_frame(frame, direction)
