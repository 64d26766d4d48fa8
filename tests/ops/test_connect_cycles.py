"""1,000 connect/disconnect cycles through the gate and the real per-caller pipeline leak nothing.

Each cycle is what a caller costs the server: admission, a fresh pipeline on the shared
engines (VAD, ASR, LLM and TTS services, every observer), start, hang-up, release. As in
``cadence serve``, the warm heap is frozen first. After a warm-up (lazy imports, bounded
caches, the allocator's high-water mark), tasks and GC-tracked objects must stay flat and RSS
must grow by far less than one session's footprint per cycle.

An ended session is ~185 KB of cyclic garbage that only a full collection frees; without the
freeze, full collections are rare on a big heap and hundreds of sessions pile up (RSS +139 MB
over 750 cycles measured here) before one long pass frees them.
"""

from __future__ import annotations

import asyncio
import gc

import psutil
import pytest

from agent.capacity.caller import StartWatch, call
from tests.ops.helpers import gate_admit, make_server, params

CYCLES = 1000
WARMUP = 250  # more than the server's 200 remembered sessions
PAIR = 2  # callers connecting at once (the gate hands slots over)


async def _state() -> tuple[int, int, float]:
    gc.collect()
    # Collected sessions' HTTP clients close themselves in tasks their finalizers start.
    await asyncio.sleep(0.5)
    gc.collect()
    return len(asyncio.all_tasks()), len(gc.get_objects()), psutil.Process().memory_info().rss / 2**20


@pytest.fixture
def frozen_heap():
    """The warm heap frozen, as ``cadence serve`` does after loading its engines."""
    from agent.runtime import freeze_gc_heap

    freeze_gc_heap()
    yield
    gc.unfreeze()


async def test_thousand_connect_disconnect_cycles(embedded, frozen_heap):
    # Plain VAD silence ends turns here: no smart-turn model per session, so the cycles are quicker.
    server, metrics = make_server(embedded, admission={"max_sessions": 1, "queue_size": PAIR, "queue_timeout_s": 30.0},
                                  vad={"turn": "silence"})
    p = params(server)
    watch = StartWatch()  # hang up once connected: the whole pipeline has started
    server.observer_factories.append(watch)

    async def one(k: int) -> None:
        record = await call(server.run_caller, p, k, [], stop_at=0.0, lead_silence_s=0.0,
                            admit=gate_admit(server), leave=server.gate.release, watch=watch)
        assert record.refused is None, record.refused

    before = None
    for k in range(0, CYCLES, PAIR):
        if k == WARMUP:
            before = await _state()
        await asyncio.gather(*(one(k + i) for i in range(PAIR)))
    after = await _state()

    assert server.gate.active == 0 and server.gate.waiting == 0
    assert server.gate.stats.admitted_total == CYCLES and server.gate.stats.refused_total == 0
    tasks, objects, rss = before
    names = sorted(t.get_name() for t in asyncio.all_tasks())[:10]
    assert after[0] == tasks, f"asyncio tasks grew from {tasks} to {after[0]}: {names}"
    grown = after[1] - objects
    assert grown < 2000, f"{grown} more GC-tracked objects after {CYCLES - WARMUP} cycles"
    assert after[2] - rss < 64.0, f"RSS grew {after[2] - rss:.1f} MiB over {CYCLES - WARMUP} cycles"
