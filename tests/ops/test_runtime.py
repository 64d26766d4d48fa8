"""Runtime: uvloop is the loop ``run`` gives, and the GC freeze moves the heap out of collection."""

from __future__ import annotations

import asyncio
import gc
import subprocess
import sys

import pytest

from agent.runtime import FreezeWatch, freeze_gc_heap, run


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
        FreezeWatch.frozen_modules = None  # this process's later tests are not under a freeze
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


def _fresh_python(code: str) -> str:
    """``code``'s output in a new interpreter (a clean ``sys.modules``, as a session process starts)."""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.strip().splitlines()[-1]


def test_a_session_process_streaming_through_the_engine_never_imports_torch() -> None:
    """Its call path (the remote Parakeet STT and smart-turn clients, the preloaded call modules) is torch-free:
    torch imported at a first call stayed outside the frozen heap, ~137,000 objects every full collection
    walked (run 97's 30-158 ms pauses in each session process)."""
    out = _fresh_python(
        "import sys\n"
        "from agent.runtime import preload_call_modules\n"
        "loaded = preload_call_modules('parakeet', 'engine', remote_asr=True)\n"
        "assert 'asr.parakeet.stt_service' in sys.modules and 'agent.smart_turn.remote' in sys.modules, loaded\n"
        "print('torch' in sys.modules, len(loaded))")
    torch_loaded, count = out.split()
    assert torch_loaded == "False" and int(count) > 0


def test_the_freeze_watch_names_the_modules_imported_after_the_freeze() -> None:
    out = _fresh_python(
        "import sys\n"
        "from agent.runtime import FreezeWatch, freeze_gc_heap\n"
        "assert FreezeWatch.imported_since() is None and 'colorsys' not in sys.modules\n"
        "freeze_gc_heap()\n"
        "assert FreezeWatch.imported_since() == 0 and FreezeWatch.newly_imported() == []\n"
        "import colorsys\n"
        "first, again = FreezeWatch.newly_imported(), FreezeWatch.newly_imported()\n"
        "print(FreezeWatch.imported_since(), ','.join(first), len(again))")
    assert out == "1 colorsys 0"
