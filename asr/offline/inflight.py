"""The ``max_inflight`` limit: requests held at once, in one process or across the host workers.

``LocalInflight`` counts in one process. ``SharedInflight`` keeps one int64 slot per host worker in
a shared anonymous file (a ``memfd`` the engine process hands to every worker); a worker admits a
request only under an exclusive POSIX record lock over the file, after summing the slots, so the
limit holds across processes exactly. The kernel drops a dead worker's lock, and a restarted worker
zeroes its own slot.
"""

from __future__ import annotations

import fcntl
import mmap
import os

import numpy as np

SLOT_BYTES = 8


class LocalInflight:
    def __init__(self) -> None:
        self.count = 0

    def try_enter(self, limit: int) -> bool:
        if self.count >= limit:
            return False
        self.count += 1
        return True

    def leave(self) -> None:
        self.count -= 1

    @property
    def total(self) -> int:
        return self.count


def shared_inflight_fd(workers: int) -> int:
    """A new zeroed file of ``workers`` slots (to pass to the workers); the caller closes it."""
    fd = os.memfd_create("cadence-asr-inflight", 0)
    os.ftruncate(fd, workers * SLOT_BYTES)
    return fd


class SharedInflight:
    def __init__(self, fd: int, slot: int) -> None:
        self.fd = fd
        size = os.fstat(fd).st_size
        if not 0 <= slot < size // SLOT_BYTES:
            raise ValueError(f"slot {slot} outside the {size // SLOT_BYTES} of the shared counter")
        self._map = mmap.mmap(fd, size)
        self.slots = np.frombuffer(self._map, np.int64)
        self.slot = slot
        with self._locked():
            self.slots[slot] = 0  # a restarted worker's predecessor may have died holding requests

    def _locked(self):  # type: ignore[no-untyped-def]
        return _Lock(self.fd)

    def try_enter(self, limit: int) -> bool:
        with self._locked():
            if int(self.slots.sum()) >= limit:
                return False
            self.slots[self.slot] += 1
            return True

    def leave(self) -> None:
        with self._locked():
            self.slots[self.slot] -= 1

    @property
    def count(self) -> int:
        """This worker's requests."""
        return int(self.slots[self.slot])

    @property
    def total(self) -> int:
        return int(self.slots.sum())


class _Lock:
    def __init__(self, fd: int) -> None:
        self.fd = fd

    def __enter__(self) -> None:
        fcntl.lockf(self.fd, fcntl.LOCK_EX)

    def __exit__(self, *_: object) -> None:
        fcntl.lockf(self.fd, fcntl.LOCK_UN)
