"""Stop the engine process when a GPU batcher's tick stops finishing, so its supervisor restarts it.

Run 73: Kokoro's two lanes replayed CUDA graphs that shared cuBLAS's workspace and the GPU hung. Both batcher
threads waited in a device-to-host copy for good while the process kept its socket open and answered nothing:
every caller heard silence until the run ended. A tick takes milliseconds to about a second (an eager batch of 64
clauses, a cold shape), so one that has run for ``limit_s`` is a hang. The watchdog then logs which batcher
stalled and every thread's stack, and exits with :data:`STALL_EXIT_CODE`. ``agent.engine_process`` restarts a dead
engine with backoff; the session processes fail over to the apology meanwhile.

Kokoro's, streaming Parakeet's and smart-turn's batchers take part, each through ``stalled_s() -> float``: how long
its oldest unfinished tick has run (0: idle).
"""

from __future__ import annotations

import asyncio
import faulthandler
import logging
import os
import sys
from collections.abc import Callable, Mapping
from typing import Any

log = logging.getLogger("cadence.engine")
STALL_EXIT_CODE = 75  # EX_TEMPFAIL: the supervisor restarts the engine


def stalled(batchers: Mapping[str, Any], limit_s: float) -> tuple[str, float] | None:
    """The first batcher whose unfinished tick has run longer than ``limit_s``, and for how long; else None."""
    for name, batcher in batchers.items():
        seconds = batcher.stalled_s()
        if seconds > limit_s:
            return name, seconds
    return None


async def watch_ticks(batchers: Mapping[str, Any], limit_s: float, every_s: float = 1.0,
                      exit_process: Callable[[int], Any] = os._exit) -> None:
    """Every ``every_s``: if a batcher's tick has run past ``limit_s``, log it with every thread's stack and
    ``exit_process(STALL_EXIT_CODE)`` (``os._exit``: a hung CUDA call does not return, so no clean shutdown can)."""
    while True:
        await asyncio.sleep(every_s)
        found = stalled(batchers, limit_s)
        if found is None:
            continue
        name, seconds = found
        log.error("%s: a tick has run %.0f s (limit %.0f s): the GPU is not finishing its work; the engine process "
                  "exits with code %d for its supervisor to restart it. Every thread's stack:", name, seconds,
                  limit_s, STALL_EXIT_CODE)
        for handler in logging.getLogger().handlers:
            handler.flush()
        faulthandler.dump_traceback(file=sys.stderr, all_threads=True)
        sys.stderr.flush()
        exit_process(STALL_EXIT_CODE)
        return


def hosted_batchers(engine: Any, asr: Any, turn: Any = None) -> dict[str, Any]:
    """The engine process's batchers that report stalls: Kokoro's, streaming Parakeet's, smart-turn's."""
    out: dict[str, Any] = {}
    batcher = getattr(engine, "batcher", None)
    if batcher is not None and hasattr(batcher, "stalled_s"):
        out[f"{getattr(engine, 'name', 'tts')} batcher"] = batcher
    if asr is not None and hasattr(asr, "stalled_s"):
        out["parakeet batcher"] = asr
    if turn is not None and hasattr(turn, "stalled_s"):
        out["smart-turn batcher"] = turn
    return out
