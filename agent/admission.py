"""Admission gate: refuse the next caller at measured capacity instead of degrading everyone.

An explicit concurrency cap plus a short bounded wait queue. Beyond both, a caller is refused
at connect (HTTP 503 + Retry-After for WebRTC, a close code for a phone socket). ``ready()``
answers whether a new caller would be admitted now, for ``/ready`` and load balancers.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass

from agent.config import AdmissionConfig


@dataclass(frozen=True)
class Refusal:
    status: int
    reason: str
    retry_after_s: int


class AdmissionGate:
    """Concurrency cap + bounded FIFO wait queue; ``overloaded`` can close the gate early."""

    def __init__(self, config: AdmissionConfig, overloaded: Callable[[], str | None] | None = None):
        self.config = config
        self.active = 0
        self.waiting = 0
        self.admitted_total = 0
        self.refused_total = 0
        self._overloaded = overloaded or (lambda: None)
        self._cond = asyncio.Condition()

    @property
    def capacity(self) -> int:
        return self.config.max_sessions

    def ready(self) -> tuple[bool, str]:
        reason = self._overloaded()
        if reason:
            return False, reason
        if self.active < self.capacity:
            return True, f"{self.active}/{self.capacity} sessions"
        return False, f"at capacity: {self.active}/{self.capacity} sessions"

    def _refuse(self, reason: str) -> Refusal:
        self.refused_total += 1
        return Refusal(503, reason, self.config.retry_after_s)

    async def acquire(self) -> Refusal | None:
        """Admit (returns None; call ``release`` when the session ends) or refuse."""
        reason = self._overloaded()
        if reason:
            return self._refuse(f"overloaded: {reason}")
        async with self._cond:
            if self.active < self.capacity and self.waiting == 0:
                self.active += 1
                self.admitted_total += 1
                return None
            if self.waiting >= self.config.queue_size:
                return self._refuse(f"at capacity ({self.active}/{self.capacity} sessions, queue full)")
            self.waiting += 1
            try:
                await asyncio.wait_for(
                    self._cond.wait_for(lambda: self.active < self.capacity), self.config.queue_timeout_s
                )
            except TimeoutError:
                return self._refuse(f"at capacity ({self.active}/{self.capacity} sessions, waited "
                                    f"{self.config.queue_timeout_s:.1f} s)")
            finally:
                self.waiting -= 1
            self.active += 1
            self.admitted_total += 1
            return None

    def release(self) -> None:
        self.active = max(0, self.active - 1)
        asyncio.get_running_loop().create_task(self._notify())

    async def _notify(self) -> None:
        async with self._cond:
            self._cond.notify_all()
