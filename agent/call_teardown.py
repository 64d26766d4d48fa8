"""Free an ended call's objects at hang-up instead of at the next full GC pass.

A pipecat pipeline is a web of reference cycles: each processor links its neighbours, its event handlers hold
bound methods of itself, its queues and tasks point back at it. When a call ends, most of its objects (~1,400 of
the ~2,300 a phone call holds on the CPU box) are unreachable only through cycles, so they wait in the oldest GC
generation until a full collection walks them, and every full pass in a busy session process grows by the calls
that ended since the last one. Once the call's worker has finished, dropping pipecat's own bookkeeping from each
processor (links, queues, tasks, event handlers, metrics) and from the worker and its runner breaks those cycles,
so reference counting frees the call at once. A processor's own attributes stay: whoever holds one (a transport's
output, a service's counters) can still read it.
"""

from __future__ import annotations

from functools import cache
from typing import Any

KEEP = frozenset({"_id", "_name"})  # the object's identity: ``str(obj)`` still works in a late log line


@cache
def pipecat_bookkeeping() -> frozenset[str]:
    """The attributes pipecat's ``FrameProcessor`` gives every processor (those of a bare one), less its identity."""
    from pipecat.processors.frame_processor import FrameProcessor

    return (frozenset(vars(FrameProcessor())) | {"_prev", "_next", "_parent", "_clock", "_observer"}) - KEEP


def call_objects(worker: Any) -> list[Any]:
    """The worker's pipeline and every processor in it (nested pipelines included), each once."""
    seen: dict[int, Any] = {}
    todo = [getattr(worker, "pipeline", None)]
    while todo:
        proc = todo.pop()
        if proc is None or id(proc) in seen:
            continue
        seen[id(proc)] = proc
        todo.extend(getattr(proc, "processors", None) or [])
    return list(seen.values())


def _drop(obj: Any, names: frozenset[str] | None) -> None:
    """Delete ``names`` (None: every attribute but the identity) from ``obj``'s ``__dict__``."""
    attrs = getattr(obj, "__dict__", None)
    if attrs is not None:
        for name in (attrs.keys() - KEEP) if names is None else (names & attrs.keys()):
            del attrs[name]


def break_call_cycles(worker: Any, owned: tuple[Any, ...] = (), borrowed: tuple[Any, ...] = ()) -> int:
    """Break an ended call's reference cycles; returns how many objects it touched.

    What the session built (the worker, ``owned`` such as its runner, the processors it made) loses every
    attribute but its identity. What it was given (``borrowed``: the transport's processors, stages passed in) and
    any processor of a pipecat transport loses only pipecat's bookkeeping, so its owner can still read it. Call it
    only once the worker's run has returned: the pipeline must not run again."""
    from pipecat.transports.base_input import BaseInputTransport
    from pipecat.transports.base_output import BaseOutputTransport

    bookkeeping, lent = pipecat_bookkeeping(), {id(b) for b in borrowed}
    procs = call_objects(worker)
    for proc in procs:
        keep_own = id(proc) in lent or isinstance(proc, BaseInputTransport | BaseOutputTransport)
        _drop(proc, bookkeeping if keep_own else None)
    for obj in (worker, *owned):
        _drop(obj, None)
    return len(procs) + 1 + len(owned)
