"""Bound the decoded audio held in memory by all requests together.

A decoded hour is 230 MB (16 kHz float32); without a bound, a burst of long uploads would
decode them all at once. A request reserves its duration (read from the file header before
decoding) and waits, in arrival order, until it fits; a file longer than the whole budget is
let in alone. Files whose duration is unknown until decoded reserve after decoding.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager


class AudioBudget:
    def __init__(self, max_seconds: float) -> None:
        self.max_seconds = max_seconds
        self.held = 0.0
        self._cond = asyncio.Condition()
        self._queue: list[object] = []

    def try_take(self, seconds: float) -> bool:
        """Take ``seconds`` at once if nobody waits and they fit (no await; ``give_back`` returns them).

        The engine process answers most host workers' reservations this way, without a task each.
        """
        if self._queue or not (self.held == 0.0 or self.held + seconds <= self.max_seconds):
            return False
        self.held += seconds
        return True

    def give_back(self, seconds: float) -> None:
        """Return what ``try_take`` took; waiters are woken."""
        self.held -= seconds
        if self.held < 1e-6:
            self.held = 0.0
        if self._queue:
            asyncio.ensure_future(self._wake())

    async def _wake(self) -> None:
        async with self._cond:
            self._cond.notify_all()

    @asynccontextmanager
    async def reserve(self, seconds: float) -> AsyncIterator[None]:
        ticket = object()
        async with self._cond:
            self._queue.append(ticket)
            try:
                await self._cond.wait_for(lambda: self._queue[0] is ticket and (
                    self.held == 0.0 or self.held + seconds <= self.max_seconds))
            finally:
                self._queue.remove(ticket)
                self._cond.notify_all()
            self.held += seconds
        try:
            yield
        finally:
            async with self._cond:
                self.held -= seconds
                if self.held < 1e-6:
                    self.held = 0.0
                self._cond.notify_all()
