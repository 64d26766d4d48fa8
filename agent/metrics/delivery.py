"""Real-time delivery of one output stream: throughput against real time, and gaps.

A reply's *delivery ratio* is its delivered audio seconds per wall second: the audio that had
arrived before its last burst, divided by the time from its first burst to its last (chunks
less than ``BURST_GAP_S`` apart form one burst, so cutting a piece into transport-sized
chunks changes nothing: the server's TTS pieces and a caller's chunks measure the same
thing). 1.0 is just keeping up with playback; 1.2 leaves 20 % headroom. A reply that arrives
in a single burst has no ratio (nothing to pace).

Gaps are judged separately: a player starts a reply at its first chunk and then plays
continuously; a chunk is *late* by how long the player would already have run dry.
"""

from __future__ import annotations

from dataclasses import dataclass

RATIO_CAP = 1000.0
BURST_GAP_S = 0.010


@dataclass(frozen=True)
class ReplyDelivery:
    """One reply as the caller's player experiences it."""

    chunks: int
    audio_s: float
    span_s: float  # first burst -> last burst
    ahead_s: float  # audio that arrived before the last burst
    max_lateness_s: float

    @property
    def ratio(self) -> float | None:
        """Delivered audio seconds per wall second; None for a single burst."""
        if self.span_s <= 0.0:
            return None
        return min(self.ahead_s / self.span_s, RATIO_CAP)


class PlayoutTracker:
    """Feed one stream's chunk arrivals; each call returns that chunk's lateness (seconds)."""

    __slots__ = ("_first", "_burst_start", "_last_at", "_play_end", "_audio", "_ahead", "_chunks", "_max_late")

    def __init__(self) -> None:
        self._first: float | None = None
        self._reset()

    def _reset(self) -> None:
        self._first = None
        self._burst_start = 0.0
        self._last_at = 0.0
        self._play_end = 0.0
        self._audio = 0.0
        self._ahead = 0.0
        self._chunks = 0
        self._max_late = 0.0

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
            self._first = self._burst_start = at
            late = 0.0
            self._play_end = at + duration_s
        else:
            if at - self._last_at > BURST_GAP_S:  # a new burst begins
                self._burst_start = at
                self._ahead = self._audio
            late = at - self._play_end if at > self._play_end else 0.0
            self._play_end = (at if late > 0.0 else self._play_end) + duration_s
            if late > self._max_late:
                self._max_late = late
        self._last_at = at
        self._audio += duration_s
        self._chunks += 1
        return late

    def finish(self) -> ReplyDelivery | None:
        """Close the current reply and start afresh; None if it had no audio."""
        if self._first is None:
            return None
        reply = ReplyDelivery(self._chunks, self._audio, self._burst_start - self._first, self._ahead,
                              self._max_late)
        self._reset()
        return reply
