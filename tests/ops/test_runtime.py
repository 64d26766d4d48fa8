"""Runtime: uvloop is the loop ``run`` gives, and the GC freeze moves the heap out of collection."""

from __future__ import annotations

import asyncio
import gc

from agent.runtime import freeze_gc_heap, run


async def _loop_module() -> str:
    return type(asyncio.get_running_loop()).__module__


def test_run_uses_uvloop_when_asked():
    assert run(_loop_module(), use_uvloop=True).startswith("uvloop")
    assert not run(_loop_module(), use_uvloop=False).startswith("uvloop")


def test_freeze_moves_live_objects_out_of_collection():
    keep = [{"i": i} for i in range(10_000)]
    try:
        stats = freeze_gc_heap()
        assert stats["frozen_objects"] >= len(keep) and gc.get_freeze_count() == stats["frozen_objects"]
        assert all(not gc.is_finalized(k) for k in keep[:1])
    finally:
        gc.unfreeze()
    assert gc.get_freeze_count() == 0
