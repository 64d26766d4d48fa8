"""The outbound audio clock: when each 20 ms chunk goes on the wire, and how late it went.

The provider plays what it receives as it receives it, so the socket must be fed in real time.
We keep ``lead_s`` of audio ahead of the caller's ear (the far end's jitter buffer) and send
every later chunk when the far end is down to that lead. A *spurt* is one stretch of bot
speech; its first chunk sets the clock. A chunk's lateness is how long after its slot it went
out (event-loop stalls, or TTS slower than real time); once lateness exceeds the lead, the far
end ran dry and the caller heard a gap (an *underrun*), and the clock restarts from that chunk.
The *pacer* share of lateness counts only from when the chunk was ready: our own stalls, as
opposed to audio that reached the transport late.
"""

from __future__ import annotations

from dataclasses import dataclass

FRAME_S = 0.02


@dataclass(frozen=True)
class ChunkTiming:
    due: float
    sent: float
    lateness_s: float  # sent - due: what the caller's jitter buffer had to absorb
    pacer_s: float  # sent - max(due, ready): our own scheduling delay (event-loop stalls)
    gap_s: float  # silence the caller heard before this chunk (0 when the far end never ran dry)
    first: bool  # first chunk of a spurt: it sets the clock, so it is never late


class PlayoutClock:
    """Tracks what the far end holds; ``due`` says when the next chunk may be sent."""

    def __init__(self, lead_s: float = 0.08):
        if lead_s < 0:
            raise ValueError("lead_s must be >= 0")
        self.lead_s = lead_s
        self.play_end = 0.0  # when the far end will have played everything sent so far
        self.spurt_start: float | None = None
        self.sent_s = 0.0  # audio sent in this spurt

    def due(self, now: float) -> float:
        """The earliest time the next chunk should go out."""
        floor = now if self.spurt_start is None else self.spurt_start
        return max(floor, self.play_end - self.lead_s)

    def sent(self, at: float, duration_s: float, due: float, ready: float | None = None) -> ChunkTiming:
        """Record a chunk put on the wire at ``at`` that was due at ``due`` and queued at ``ready``."""
        first = self.spurt_start is None
        gap = 0.0 if first else max(0.0, at - self.play_end)
        if first:
            self.spurt_start = at
            self.sent_s = 0.0
        self.play_end = max(self.play_end, at) + duration_s
        self.sent_s += duration_s
        lateness = 0.0 if first else max(0.0, at - due)
        pacer = max(0.0, at - max(due, at if ready is None else ready))
        return ChunkTiming(due=due, sent=at, lateness_s=lateness, pacer_s=pacer, gap_s=gap, first=first)

    def end_spurt(self) -> None:
        """The bot stopped speaking; what the far end holds still plays out."""
        self.spurt_start = None

    def clear(self, now: float) -> float:
        """The far end dropped its buffer (``clear``); returns the audio that was dropped (s)."""
        dropped = max(0.0, self.play_end - now)
        self.play_end = min(self.play_end, now)
        self.spurt_start = None
        return dropped

    def buffered(self, now: float) -> float:
        """Seconds of audio the far end still has to play."""
        return max(0.0, self.play_end - now)

    def playing(self, now: float) -> bool:
        """Whether the caller is hearing (or about to hear) bot audio."""
        return self.spurt_start is not None or self.play_end > now
