"""The runtime monitor records event-loop lag and every GC pause, and logs the long pauses with their
generation (a full collection of a large heap is named in the log, not only in the p99)."""

from __future__ import annotations

import asyncio
import gc
import re

from loguru import logger

from agent.metrics.runtime_monitor import RuntimeMonitor
from agent.metrics.stages import StageMetrics


class Cycle:
    def __init__(self) -> None:
        self.me = self


def test_gc_pauses_are_recorded_and_long_full_collections_logged() -> None:
    metrics = StageMetrics()
    monitor = RuntimeMonitor(metrics, interval_s=0.01, log_pause_ms=0.0, log_every_s=0.0)
    lines: list[str] = []
    sink = logger.add(lines.append, level="INFO", format="{message}")

    async def run() -> None:
        monitor.start()
        garbage = [Cycle() for _ in range(200_000)]
        del garbage
        gc.collect(2)  # a full collection that finds 200,000 cycles
        await asyncio.sleep(0.05)
        await monitor.stop()

    # Automatic collections stay off in the window, so the explicit one is the only full collection the
    # report can name (on a loaded 2-core CI box an automatic one was once the longest pause).
    gc.disable()
    try:
        asyncio.run(run())
    finally:
        gc.enable()
        logger.remove(sink)
    pauses = metrics.histograms["gc_pause"]
    assert pauses.count_total >= 1
    assert metrics.histograms["event_loop_lag"].count_total >= 1
    full = [line for line in lines if line.startswith("GC:")]
    assert full, lines
    collected = re.search(r"generation 2, (\d+) objects collected", full[-1])
    assert collected and int(collected.group(1)) >= 200_000, full
