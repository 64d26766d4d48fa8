"""A method held until released: the CPU stand-in for a GPU call that does not finish (the engine watchdog's tests)."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator


@contextlib.contextmanager
def held_call(obj: object, name: str, timeout_s: float = 30.0) -> Iterator[threading.Event]:
    """``obj.name`` waits for the yielded event (at most ``timeout_s``) before it runs; released and restored on exit."""
    release, call = threading.Event(), getattr(obj, name)

    def held(*args, **kwargs):
        release.wait(timeout_s)
        return call(*args, **kwargs)

    setattr(obj, name, held)
    try:
        yield release
    finally:
        release.set()
        setattr(obj, name, call)
