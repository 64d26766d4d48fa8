"""Real-time delivery of one output stream, judged against a real-time player.

The player starts a reply when its first chunk arrives and then plays continuously. A chunk
is *late* by how long the player would already have run dry waiting for it.

A reply's delivery ratio is its worst moment of "delivered audio seconds per wall second":
``min over chunks k of (audio that arrived before chunk k) / (arrival of k - first arrival)``.
It is the fastest playback speed the reply could have sustained without ever running dry:
>= 1.0 means no gap, 1.2 leaves 20 % slack. Splitting a chunk into pieces that arrive
together does not change it, so the server (TTS pieces) and a caller (transport-sized
chunks) measure the same thing. A reply whose audio arrives in one burst has no ratio.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

RATIO_CAP = 1000.0


@dataclass(frozen=True)
class ReplyDelivery:
    """One reply as the caller's player experiences it."""

    chunks: int
    audio_s: float
    span_s: float  # first arrival -> last arrival
    ratio: float | None  # worst delivered-audio-per-wall-second; None for a single burst
    max_lateness_s: float


class PlayoutTracker:
    """Feed one stream's chunk arrivals; each call returns that chunk's lateness (seconds)."""

    __slots__ = ("_first", "_last_at", "_play_end", "_audio", "_chunks", "_max_late", "_min_ratio")

    def __init__(self) -> None:
        self._first: float | None = None
        self._reset()

    def _reset(self) -> None:
        self._first = None
        self._last_at = 0.0
        self._play_end = 0.0
        self._audio = 0.0
        self._chunks = 0
        self._max_late = 0.0
        self._min_ratio = math.inf

    @property
    def active(self) -> bool:
        return self._first is not None

    @property
    def play_end(self) -> float:
        """When the player finishes the audio received so far."""
        return self._play_end

    def chunk(self, at: float, duration_s: float) -> float:
        """Record a chunk arriving at ``at`` (seconds); return how late it was."""
        if self._first is None:
            self._first = at
            late = 0.0
            self._play_end = at + duration_s
        else:
            late = at - self._play_end if at > self._play_end else 0.0
            self._play_end = (at if late > 0.0 else self._play_end) + duration_s
            if late > self._max_late:
                self._max_late = late
            elapsed = at - self._first
            if elapsed > 0.0:
                ratio = self._audio / elapsed
                if ratio < self._min_ratio:
                    self._min_ratio = ratio
        self._last_at = at
        self._audio += duration_s
        self._chunks += 1
        return late

    def finish(self) -> ReplyDelivery | None:
        """Close the current reply and start afresh; None if it had no audio."""
        if self._first is None:
            return None
        ratio = None if self._min_ratio == math.inf else min(self._min_ratio, RATIO_CAP)
        reply = ReplyDelivery(self._chunks, self._audio, self._last_at - self._first, ratio, self._max_late)
        self._reset()
        return reply
