"""Children Cadence owns (the LLM server, the engine process): spawned in their own process group and
killed with their parent, stopped by group, started off the event loop's thread, restarted with
backoff when they die, read by pid.

A class using it is a dataclass with ``process``, ``up``, ``restarts``, ``max_backoff_s`` and
``_stopping`` fields and ``_spawn() -> Popen``, ``_wait_ready(proc)`` and ``stop()`` methods.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import os
import signal
import subprocess
import sys
from typing import Any, ClassVar

from loguru import logger

PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    """``preexec_fn``: the kernel SIGKILLs this child when the thread that forked it exits (Linux)."""
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def spawn_child(command: list[str], nice: int = 0, **kwargs) -> subprocess.Popen:
    """A supervised child: its own process group, killed with its parent on Linux; ``nice`` > 0 lowers
    its CPU priority (``os.nice``).

    Call it from a thread that lives as long as the process (the main / event-loop thread):
    PDEATHSIG fires when the forking *thread* exits.
    """

    def prepare() -> None:
        die_with_parent()
        if nice > 0:
            os.nice(nice)

    return subprocess.Popen(command, start_new_session=True, preexec_fn=prepare, **kwargs)  # noqa: PLW1509


def stop_child(proc: subprocess.Popen | None, timeout_s: float = 5.0) -> None:
    """SIGTERM the child's process group, SIGKILL it after ``timeout_s``; reap it."""
    if proc is None or proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except (ProcessLookupError, PermissionError):
        proc.terminate()
    try:
        proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.kill()
        proc.wait(timeout=timeout_s)


class SupervisedChild:
    child_label: ClassVar[str] = "child process"
    restart_errors: ClassVar[tuple[type[BaseException], ...]] = (Exception,)
    process: subprocess.Popen | None
    up: bool
    restarts: int
    max_backoff_s: float
    _stopping: bool

    def _spawn(self) -> subprocess.Popen:
        raise NotImplementedError

    def _wait_ready(self, proc: subprocess.Popen) -> None:
        """Block until ``proc`` serves (raise if it cannot); the caller then sets ``up``, on the event loop."""
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    @property
    def pid(self) -> int | None:
        """The running child's process id (NVML reads its GPU memory by it); None when stopped."""
        return self.process.pid if self.alive else None

    @property
    def pids(self) -> list[int]:
        """``[pid]`` while running, else ``[]`` (the shape ``LLMServerGroup.pids`` has too)."""
        return [self.process.pid] if self.alive and self.process is not None else []

    async def astart(self) -> Any:
        """Spawn on the calling (event-loop) thread (PDEATHSIG follows the forking thread), wait in a worker."""
        self._stopping = False
        proc = self._spawn()
        try:
            await asyncio.to_thread(self._wait_ready, proc)
        except BaseException:
            self.stop()
            raise
        self.up = True
        return self

    async def supervise(self, poll_s: float = 0.5) -> None:
        """Restart the child whenever it dies (backoff 0.5 s doubling to ``max_backoff_s``); until cancelled."""
        backoff = 0.5
        while not self._stopping:
            await asyncio.sleep(poll_s)
            if self._stopping or self.alive:
                continue
            self.up = False
            code = None if self.process is None else self.process.returncode
            logger.error(f"{self.child_label} died (exit code {code}); restarting in {backoff:g} s")
            await asyncio.sleep(backoff)
            if self._stopping:
                return
            try:
                proc = self._spawn()
                await asyncio.to_thread(self._wait_ready, proc)
                self.restarts += 1  # counted before ``up`` says so: a reader never sees it up and uncounted
                self.up = True
                backoff = 0.5
            except self.restart_errors as exc:
                logger.error(f"{self.child_label} restart failed: {exc}")
                stop_child(self.process)
                backoff = min(self.max_backoff_s, backoff * 2)
