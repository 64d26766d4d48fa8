"""Process runtime: uvloop as the event loop, and a frozen GC heap after warm-up.

After every model is loaded and warmed, ``freeze_gc_heap`` collects once and moves every
surviving object into the permanent generation, so later collections never walk the
(large, long-lived) model and library heap: shorter, rarer GC pauses on the audio path.
"""

from __future__ import annotations

import asyncio
import gc
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
