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
    FreezeWatch.mark()
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


# What a call imports on its first use, not at start-up: the LLM client's chat resource and stream (openai loads
# them on first access), httpx's connection pool and its async backend (on the first request), pipecat's STT base.
# Imported after the GC freeze, each stays in the collected heap for the process's life: a session process
# streaming Parakeet through the engine process imported torch whole at its first call (~1,100 modules, ~137,000
# objects), and every later full collection walked them (30-158 ms pauses at 256 callers, run 97).
CALL_MODULES = (
    "openai.resources.chat.chat", "openai.resources.chat.completions.completions", "openai.lib.streaming.chat",
    "openai.pagination", "jiter", "httpcore2", "httpcore", "anyio._backends._asyncio", "anyio.streams.memory",
    "anyio.streams.stapled", "anyio.streams.tls", "truststore", "pipecat.services.stt_service",
    "pipecat.audio.vad.data", "pipecat.audio.turn.smart_turn.data",
    "importlib.readers", "importlib.resources.readers",  # importlib.resources.files(), as smart-turn's loader
    "numpy.fft",  # imported on a call's first audio (CPU box census, bench/session_gc_heap.sh)
)
ASR_MODULES = {
    "parakeet": ("asr.parakeet.stt_service", "asr.parakeet.remote"),
    "whisper": ("asr.whisper_stt",),
    "moonshine": ("asr.moonshine.stt",),
}
TURN_MODULES = {"engine": ("agent.smart_turn.remote",)}


def preload_call_modules(asr_engine: str, turn_model: str, remote_asr: bool) -> list[str]:
    """Import what a call imports on its first use, before the heap is frozen; returns the modules it loaded.

    In-process Parakeet (``remote_asr`` false) keeps its torch modules, loaded with the engine; a session
    process whose Parakeet streams in the engine process imports none of them."""
    import importlib

    before = set(sys.modules)
    names = [*CALL_MODULES, *ASR_MODULES.get(asr_engine, ()), *TURN_MODULES.get(turn_model, ())]
    if asr_engine == "parakeet" and not remote_asr:
        names.append("asr.parakeet.shared_engine")
    for name in names:
        try:
            importlib.import_module(name)
        except ImportError:  # an optional library this install does not have (httpcore vs httpcore2, truststore)
            continue
    return sorted(set(sys.modules) - before)


class FreezeWatch:
    """The modules imported after the heap was frozen (``cadence_modules_after_gc_freeze``): each one's objects
    are walked by every full collection. None when a call's imports were all preloaded."""

    frozen_modules: frozenset[str] | None = None
    _reported = 0

    @classmethod
    def mark(cls) -> None:
        cls.frozen_modules = frozenset(sys.modules)
        cls._reported = len(sys.modules)

    @classmethod
    def imported_since(cls) -> int | None:
        """How many modules were imported after the freeze (None: not frozen)."""
        if cls.frozen_modules is None:
            return None
        return len(set(sys.modules) - cls.frozen_modules) if len(sys.modules) != len(cls.frozen_modules) else 0

    @classmethod
    def newly_imported(cls) -> list[str]:
        """The modules imported after the freeze that were not reported yet (cheap when there are none)."""
        if cls.frozen_modules is None or len(sys.modules) == cls._reported:
            return []
        cls._reported = len(sys.modules)
        return sorted(set(sys.modules) - cls.frozen_modules)
