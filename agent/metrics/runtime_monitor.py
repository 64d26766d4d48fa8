"""Event-loop lag and GC pauses, sampled into the stage histograms.

A timer every ``interval_s`` records how late it fired (everything that blocks the loop,
from a slow callback to a GC pass, shows up here). GC pauses are timed by a ``gc.callbacks``
hook that only appends to a deque (it may run on any thread); the timer drains it.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import time
from collections import deque

from agent.metrics.stages import StageMetrics


class RuntimeMonitor:
    def __init__(self, metrics: StageMetrics, interval_s: float = 0.05):
        self.metrics = metrics
        self.interval_s = interval_s
        self._task: asyncio.Task | None = None
        self._gc_started = 0.0
        self._gc_pauses: deque[float] = deque(maxlen=4096)

    def _on_gc(self, phase: str, _info: dict) -> None:
        if phase == "start":
            self._gc_started = time.perf_counter()
        elif self._gc_started:
            self._gc_pauses.append((time.perf_counter() - self._gc_started) * 1000.0)
            self._gc_started = 0.0

    def start(self) -> None:
        if self._task is None:
            gc.callbacks.append(self._on_gc)
            self._task = asyncio.get_running_loop().create_task(self._run(), name="cadence-runtime-monitor")

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is None:
            return
        with contextlib.suppress(ValueError):
            gc.callbacks.remove(self._on_gc)
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            due = loop.time() + self.interval_s
            await asyncio.sleep(self.interval_s)
            now = time.monotonic()
            self.metrics.record("event_loop_lag", (loop.time() - due) * 1000.0, now)
            while self._gc_pauses:
                self.metrics.record("gc_pause", self._gc_pauses.popleft(), now)
