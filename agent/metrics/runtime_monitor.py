"""Event-loop lag and GC pauses, sampled into the stage histograms.

A timer every ``interval_s`` records how late it fired (everything that blocks the loop,
from a slow callback to a GC pass, shows up here). GC pauses are timed by a ``gc.callbacks``
hook that only appends to a deque (it may run on any thread); the timer drains it. Pauses of at least
``log_pause_ms`` are also logged, at most once per ``log_every_s``, with their generation and what the
collector found: a long pause's cause (a full collection of a large heap, finalizers of ended sessions) is
then in the server's log, not only in the ``gc_pause`` tail.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import time
from collections import deque

from loguru import logger

from agent.metrics.stages import StageMetrics
from agent.runtime import FreezeWatch


class RuntimeMonitor:
    def __init__(self, metrics: StageMetrics, interval_s: float = 0.05, log_pause_ms: float = 20.0,
                 log_every_s: float = 5.0):
        self.metrics = metrics
        self.interval_s = interval_s
        self.log_pause_ms = log_pause_ms
        self.log_every_s = log_every_s
        self._task: asyncio.Task | None = None
        self._gc_started = 0.0
        self._gc_pauses: deque[float] = deque(maxlen=4096)
        self._long: deque[tuple[float, int, int, int]] = deque(maxlen=256)  # ms, generation, collected, uncollectable
        self._logged_at = 0.0

    def _on_gc(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._gc_started = time.perf_counter()
        elif self._gc_started:
            ms = (time.perf_counter() - self._gc_started) * 1000.0
            self._gc_pauses.append(ms)
            self._gc_started = 0.0
            if ms >= self.log_pause_ms:
                self._long.append((ms, int(info.get("generation", -1)), int(info.get("collected", 0)),
                                   int(info.get("uncollectable", 0))))

    def _log_long_pauses(self, now: float) -> None:
        if not self._long or now - self._logged_at < self.log_every_s:
            return
        pauses = list(self._long)
        self._long.clear()
        self._logged_at = now
        worst = max(pauses)
        by_gen = {g: sum(1 for p in pauses if p[1] == g) for g in sorted({p[1] for p in pauses})}
        logger.info(f"GC: {len(pauses)} pause(s) >= {self.log_pause_ms:g} ms since the last report "
                    f"(by generation {by_gen}); the longest {worst[0]:.0f} ms, generation {worst[1]}, "
                    f"{worst[2]} objects collected; collections so far by generation "
                    f"{[st['collections'] for st in gc.get_stats()]}, {gc.get_freeze_count()} objects frozen")

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
            self._log_long_pauses(now)
            late = FreezeWatch.newly_imported()
            if late:  # what agent.runtime.preload_call_modules should have imported before the freeze
                logger.warning(f"{len(late)} module(s) imported after the GC freeze (walked by every full "
                               f"collection from now on): {', '.join(late[:40])}")
