"""Runtime: uvloop is the loop ``run`` gives, and the GC freeze moves the heap out of collection."""

from __future__ import annotations

import asyncio
import gc

import pytest

from agent.runtime import freeze_gc_heap, run


async def _loop_module() -> str:
    return type(asyncio.get_running_loop()).__module__


def test_run_uses_uvloop_when_asked():
    assert run(_loop_module(), use_uvloop=True).startswith("uvloop")
    assert not run(_loop_module(), use_uvloop=False).startswith("uvloop")


def test_freeze_moves_live_objects_out_of_collection():
    keep = [{"i": [i]} for i in range(10_000)]  # tracked by the GC (a dict of ints alone is not)
    assert all(gc.is_tracked(k) for k in keep)
    try:
        stats = freeze_gc_heap()
        # Threads left by earlier tests may free frozen objects meanwhile: the count can only shrink.
        assert len(keep) <= gc.get_freeze_count() <= stats["frozen_objects"]
        collectable = {id(o) for o in gc.get_objects()}  # the permanent generation is not listed
        assert not any(id(k) in collectable for k in keep)
    finally:
        gc.unfreeze()
    assert gc.get_freeze_count() == 0


def test_gil_switch_interval_is_shortened_only_for_gpu_streaming() -> None:
    import sys

    from agent.runtime import apply_switch_interval, switch_interval_ms

    assert switch_interval_ms(0, "parakeet", "cuda:0") == 0.5
    assert switch_interval_ms(0, "parakeet", "cuda:0", batcher_here=False) is None  # its engine process has it
    assert switch_interval_ms(0.5, "parakeet", "cuda:0", batcher_here=False) == 0.5  # as configured
    assert switch_interval_ms(0, "whisper", "cpu") is None
    assert switch_interval_ms(0, "parakeet", "cpu") is None
    assert switch_interval_ms(2.0, "whisper", "cpu") == 2.0
    with pytest.raises(ValueError, match="gil_switch_interval_ms"):
        switch_interval_ms(-1, "parakeet", "cuda")
    before = sys.getswitchinterval()
    try:
        assert abs(apply_switch_interval(0, "parakeet", "cuda") - 0.5) < 1e-9
        assert abs(sys.getswitchinterval() - 0.0005) < 1e-12
    finally:
        sys.setswitchinterval(before)
