"""The GC heap of every Cadence process, sampled for ``bench/session_gc_heap.sh`` (imported by Python at start-up
when this folder is on ``PYTHONPATH``; inert unless ``CADENCE_GC_CENSUS`` names an output folder).

Every 10 s a thread writes one line per process to ``$CADENCE_GC_CENSUS/census-<pid>.txt``: the objects the
collector tracks (what a full collection walks), those frozen out of its reach, the modules loaded and the
collections so far, then the 15 most common types. When two samples in a row find the same count (the process
is idle: its calls have ended) it frees their garbage with one full collection, then times a second: what each
full pass over that process's heap costs; that first idle pass also names what it freed by type
(``garbage-<pid>.txt``: the reference cycles the ended calls left). It also records which modules were imported after ``gc.freeze()`` (``modules-<pid>.txt``)."""

from __future__ import annotations

import collections
import gc
import os
import sys
import threading
import time

OUT = os.environ.get("CADENCE_GC_CENSUS", "")


def _kind(obj: object) -> str:
    cls = type(obj)
    return f"{getattr(cls, '__module__', '')}.{getattr(cls, '__qualname__', '?')}"


def _sample(out: str, t0: float, last: list[int]) -> None:
    objs = gc.get_objects()
    tracked, kinds = len(objs), collections.Counter(_kind(o) for o in objs)
    del objs
    idle = ""
    if last and last[-1] == tracked:  # nothing allocated or freed since the last sample: time a full pass
        freed = _collect_naming_garbage(out)  # the ended calls' garbage first, then one pass over what is left
        start = time.perf_counter()
        gc.collect()
        idle = f" idle_full_collection_ms={(time.perf_counter() - start) * 1e3:.1f} freed_before={freed}"
    last.append(tracked)
    with open(out, "a") as f:
        f.write(f"--- t={time.time() - t0:.0f}s argv={' '.join(sys.argv[:2])[-60:]} tracked={tracked} "
                f"frozen={gc.get_freeze_count()} modules={len(sys.modules)} "
                f"collections={[s['collections'] for s in gc.get_stats()]}{idle}\n")
        f.writelines(f"{n:9d} {k}\n" for k, n in kinds.most_common(15))


def _collect_naming_garbage(out: str) -> int:
    """One full collection; the first time, what it found in reference cycles by type and how long that pass
    took (``garbage-<pid>.txt``): the cycles the ended calls left, which only a full collection frees."""
    path = out.replace("census-", "garbage-")
    if os.path.exists(path):
        return gc.collect()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        start = time.perf_counter()
        found = gc.collect()
        took_ms = (time.perf_counter() - start) * 1e3
        kinds = collections.Counter(_kind(o) for o in gc.garbage)
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
    with open(path, "w") as f:
        f.write(f"{found} objects in reference cycles; the full pass that found them took {took_ms:.1f} ms\n")
        f.writelines(f"{n:9d} {k}\n" for k, n in kinds.most_common(60))
    return found + gc.collect()


def _census() -> None:
    out, t0, last = os.path.join(OUT, f"census-{os.getpid()}.txt"), time.time(), []
    while True:
        time.sleep(10)
        try:
            _sample(out, t0, last)
        except Exception as exc:  # a census must not take its process down
            with open(out, "a") as f:
                f.write(f"census failed: {exc!r}\n")


def _watch_freeze() -> None:
    freeze = gc.freeze

    def freeze_and_remember() -> None:
        before = set(sys.modules)
        freeze()

        def later() -> None:
            time.sleep(45)
            late = sorted(set(sys.modules) - before)
            with open(os.path.join(OUT, f"modules-{os.getpid()}.txt"), "w") as f:
                f.write(f"{len(before)} modules at the freeze, {len(late)} imported after it\n")
                f.writelines(f"{m}\n" for m in late)

        threading.Thread(target=later, daemon=True).start()

    gc.freeze = freeze_and_remember


if OUT:
    os.makedirs(OUT, exist_ok=True)
    threading.Thread(target=_census, daemon=True, name="gc-census").start()
    _watch_freeze()
