"""Process runtime: uvloop as the event loop, the GIL hand-off interval, and a frozen GC heap after warm-up.

After every model is loaded and warmed, ``freeze_gc_heap`` collects once and moves every
surviving object into the permanent generation, so later collections never walk the
(large, long-lived) model and library heap: shorter, rarer GC pauses on the audio path.
"""

from __future__ import annotations

import asyncio
import gc
import sys
import time
from collections.abc import Coroutine
from typing import Any, TypeVar

from loguru import logger

T = TypeVar("T")


def run(main: Coroutine[Any, Any, T], use_uvloop: bool = True) -> T:
    """``asyncio.run`` on uvloop when it is installed and asked for."""
    if use_uvloop:
        try:
            import uvloop

            return uvloop.run(main)
        except ImportError:
            logger.warning("uvloop is not installed; using the default asyncio loop")
    return asyncio.run(main)


def freeze_gc_heap() -> dict[str, float]:
    """Collect, then freeze everything alive now out of future GC passes."""
    t0 = time.perf_counter()
    gc.collect()
    gc.freeze()
    took = time.perf_counter() - t0
    stats = {"frozen_objects": float(gc.get_freeze_count()), "seconds": took}
    logger.info(f"GC heap frozen: {gc.get_freeze_count()} objects in {took * 1000:.0f} ms")
    return stats


GPU_STREAMING_SWITCH_INTERVAL_MS = 0.5


def switch_interval_ms(configured_ms: float, asr_engine: str, asr_device: str,
                       batcher_here: bool = True) -> float | None:
    """The GIL switch interval to use (ms), or None to keep Python's default.

    A streaming Parakeet batcher runs its GPU calls in a worker thread that needs the GIL back after
    every torch call, while the event loop serving hundreds of callers holds it for up to the
    interval each time: on the H200 (bench/results/run11) 0.5 ms instead of 5 ms took 512 callers
    from p99 end of speech -> final 56 ms to 36 ms. ``batcher_here``: this process hosts that batcher; a session
    process whose Parakeet streams in an engine process (``server.engine_process``) keeps the default, as its
    threads (Silero's and smart-turn's ONNX runs) gain nothing from handing the GIL over ten times as often.
    """
    if configured_ms < 0:
        raise ValueError(f"runtime.gil_switch_interval_ms must be >= 0 (0 = auto), not {configured_ms}")
    if configured_ms > 0:
        return configured_ms
    if batcher_here and asr_engine == "parakeet" and asr_device.startswith("cuda"):
        return GPU_STREAMING_SWITCH_INTERVAL_MS
    return None


def apply_switch_interval(configured_ms: float, asr_engine: str, asr_device: str, batcher_here: bool = True) -> float:
    """Set the interval :func:`switch_interval_ms` picks; returns the interval in effect (ms)."""
    chosen = switch_interval_ms(configured_ms, asr_engine, asr_device, batcher_here)
    if chosen is not None:
        sys.setswitchinterval(chosen / 1000.0)
        logger.info(f"GIL switch interval {chosen:g} ms")
    return sys.getswitchinterval() * 1000.0
