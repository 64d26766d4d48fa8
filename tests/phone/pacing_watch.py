"""Tell the phone transport's underruns from the machine's: stalls of the event loop the in-process
server runs on, and when each underrun the transport counted happened.

An underrun (the caller's playout ran dry) is the transport's fault unless the loop itself could
not run while the far end went dry: a loaded box that deschedules the process for longer than the
lead starves any pacer. ``unexplained`` keeps only the underruns no loop stall accounts for, so a
test can require none in steady playback whatever the machine's load, and still fail on a pacer
that sends late while the loop is free.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

from transports.phone.stats import PHONE_STATS

UNDERRUN = "output_underrun_gap_ms"


@dataclass
class PacingWatch:
    """``async with PacingWatch() as watch:`` records loop stalls and the transport's underruns."""

    tick_s: float = 0.005
    min_stall_s: float = 0.02
    slack_s: float = 0.02  # scheduling around a stall: who runs first once the loop is back
    stalls: list[tuple[float, float]] = field(default_factory=list)  # (from, to), monotonic
    underruns: list[tuple[float, float]] = field(default_factory=list)  # (when counted, gap s)
    _task: asyncio.Task | None = None

    def _on_stat(self, name: str, value: float) -> None:
        if name == UNDERRUN:
            self.underruns.append((time.monotonic(), value / 1000.0))

    async def _watch(self) -> None:
        while True:
            due = time.monotonic() + self.tick_s
            await asyncio.sleep(self.tick_s)
            woke = time.monotonic()
            if woke - due >= self.min_stall_s:
                if self.stalls and due - self.stalls[-1][1] <= 2 * self.tick_s:  # one stall, briefly interrupted
                    self.stalls[-1] = (self.stalls[-1][0], woke)
                else:
                    self.stalls.append((due, woke))

    async def __aenter__(self) -> PacingWatch:
        PHONE_STATS.add_listener(self._on_stat)
        self._task = asyncio.create_task(self._watch())
        return self

    async def __aexit__(self, *exc: object) -> None:
        PHONE_STATS.remove_listener(self._on_stat)
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    def explained(self, at: float, gap_s: float) -> bool:
        """Whether the loop was stalled all the while the far end was dry before the chunk sent at ``at``."""
        went_dry = at - gap_s
        return any(start <= went_dry + self.slack_s and end >= at - self.slack_s for start, end in self.stalls)

    @property
    def unexplained(self) -> list[tuple[float, float]]:
        return [(at, gap) for at, gap in self.underruns if not self.explained(at, gap)]

    def describe(self) -> str:
        return (f"underruns (t, gap s) {[(round(a, 3), round(g, 3)) for a, g in self.underruns]}; "
                f"loop stalls {[(round(a, 3), round(b - a, 3)) for a, b in self.stalls]}")
