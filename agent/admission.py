"""Admission gate: refuse the next caller at measured capacity instead of degrading everyone.

An explicit concurrency cap plus a short bounded FIFO wait queue. Beyond both, a caller is
refused at connect (HTTP 503 + Retry-After for WebRTC, close code 1013 "try again later"
for a phone socket). While callers are talking, a stage out of its jitter budget
(``overloaded``) also refuses new callers: a new caller must never hurt the ones already
talking. With nobody talking there is nobody to hurt, so the budgets do not close an empty
server; "talking" means sessions really running (``set_running``: caller audio flowing), not
slots held by sessions that are connecting or stuck. ``ready()`` answers whether a new caller
would be admitted now, for ``/ready``.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from agent.config import AdmissionConfig

WS_TRY_AGAIN_LATER = 1013  # RFC 6455 close code for "server overloaded, retry later"


@dataclass(frozen=True)
class Refusal:
    status: int
    reason: str
    retry_after_s: int
    kind: str = "capacity"  # capacity | queue_full | queue_timeout | overloaded
    close_code: int = WS_TRY_AGAIN_LATER


@dataclass
class GateStats:
    admitted_total: int = 0
    queued_total: int = 0
    queue_wait_s_total: float = 0.0
    refused: dict[str, int] = field(default_factory=dict)

    @property
    def refused_total(self) -> int:
        return sum(self.refused.values())


class AdmissionGate:
    """Concurrency cap + bounded FIFO wait queue; ``overloaded`` closes the gate early."""

    def __init__(self, config: AdmissionConfig, overloaded: Callable[[], str | None] | None = None):
        self.config = config
        self.active = 0
        self.stats = GateStats()
        self._overloaded = overloaded or (lambda: None)
        self._running: Callable[[], int] = lambda: self.active
        self._waiters: deque[asyncio.Future[None]] = deque()

    @property
    def capacity(self) -> int:
        return self.config.max_sessions

    @property
    def waiting(self) -> int:
        return len(self._waiters)

    @property
    def admitted_total(self) -> int:
        return self.stats.admitted_total

    @property
    def refused_total(self) -> int:
        return self.stats.refused_total

    def set_overloaded(self, overloaded: Callable[[], str | None]) -> None:
        self._overloaded = overloaded

    def set_running(self, running: Callable[[], int]) -> None:
        """How many admitted sessions are really running (default: every admitted one)."""
        self._running = running

    def _overload(self) -> str | None:
        return self._overloaded() if self.active > 0 and self._running() > 0 else None

    def ready(self) -> tuple[bool, str]:
        reason = self._overload()
        if reason:
            return False, f"overloaded: {reason}"
        if self.active < self.capacity:
            return True, f"{self.active}/{self.capacity} sessions"
        return False, f"at capacity: {self.active}/{self.capacity} sessions"

    def _refuse(self, kind: str, reason: str) -> Refusal:
        self.stats.refused[kind] = self.stats.refused.get(kind, 0) + 1
        return Refusal(503, reason, self.config.retry_after_s, kind)

    def _admit(self) -> None:
        self.active += 1
        self.stats.admitted_total += 1

    async def acquire(self) -> Refusal | None:
        """Admit (returns None; call ``release`` when the session ends) or refuse."""
        reason = self._overload()
        if reason:
            return self._refuse("overloaded", f"overloaded: {reason}")
        if self.active < self.capacity and not self._waiters:
            self._admit()
            return None
        if len(self._waiters) >= self.config.queue_size:
            return self._refuse("queue_full", f"at capacity ({self.active}/{self.capacity} sessions, queue full)")
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        self.stats.queued_total += 1
        t0 = time.monotonic()
        try:
            await asyncio.wait_for(asyncio.shield(waiter), self.config.queue_timeout_s)
        except TimeoutError:
            if waiter.done():  # the slot was handed over just as the wait ran out
                return None
            waiter.cancel()
            self._remove(waiter)
            return self._refuse("queue_timeout", f"at capacity ({self.active}/{self.capacity} sessions, "
                                                 f"waited {self.config.queue_timeout_s:.1f} s)")
        except BaseException:  # the caller went away while queued
            if waiter.done() and not waiter.cancelled():
                self.release()  # give the slot that was handed over to the next in line
            else:
                waiter.cancel()
                self._remove(waiter)
            raise
        finally:
            self.stats.queue_wait_s_total += time.monotonic() - t0
        return None

    def _remove(self, waiter: asyncio.Future[None]) -> None:
        with contextlib.suppress(ValueError):
            self._waiters.remove(waiter)

    def release(self) -> None:
        """A session ended: hand its slot to the first caller waiting, or free it."""
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                self.stats.admitted_total += 1
                waiter.set_result(None)  # the slot passes on; ``active`` is unchanged
                return
        self.active = max(0, self.active - 1)

    def resize(self, max_sessions: int) -> None:
        """Change the cap at run time; waiting callers fill any new room."""
        self.config.max_sessions = max(0, int(max_sessions))
        while self._waiters and self.active < self.capacity:
            waiter = self._waiters.popleft()
            if not waiter.done():
                self._admit()
                waiter.set_result(None)
