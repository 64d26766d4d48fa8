"""``python -m agent.engine_server`` as a test or bench child: started on a socket, stopped by group."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from typing import Any

from transports.engine_link import EngineUnavailable, hello


def start_engine_server(path: str, spec: dict[str, Any], timeout_s: float = 120.0,
                        extra: tuple[str, ...] = ()) -> subprocess.Popen:
    """The engine server for ``spec`` on socket ``path`` (one torch thread), with ``extra`` arguments; returns once
    ``hello`` answers."""
    proc = subprocess.Popen([sys.executable, "-m", "agent.engine_server", "--socket", path, "--spec", json.dumps(spec),
                             *extra], start_new_session=True, env=dict(os.environ, OMP_NUM_THREADS="1"))
    deadline = time.monotonic() + timeout_s
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"engine process exited with {proc.returncode}")
        try:
            hello(path, 1.0)
            return proc
        except EngineUnavailable:
            if time.monotonic() > deadline:
                stop_engine_server(proc)
                raise RuntimeError(f"engine process not ready after {timeout_s:.0f} s") from None
            time.sleep(0.1)


def stop_engine_server(proc: subprocess.Popen) -> None:
    """SIGTERM its process group, SIGKILL after 10 s."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def engine_command(config: Any) -> list[str]:
    """The command ``config``'s managed engine process would run; the socket folder it names is removed again."""
    from agent.engine_process import ManagedEngineProcess

    engine = ManagedEngineProcess.for_config(config)
    try:
        return engine.command()
    finally:
        engine.stop()
