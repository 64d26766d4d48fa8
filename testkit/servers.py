"""Start real ``cadence serve`` processes for tests and stop them afterwards."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


@contextmanager
def cadence_process(args: list[str], ready: str, timeout_s: float = 180.0,
                    log_path: Path | None = None) -> Iterator[dict]:
    """Run ``python -m agent.cli ARGS``; yield {'url', 'log', 'proc'} once ``ready`` (a regex
    whose group 1 is the URL) matches a line of its output; stop it afterwards."""
    with ready_process([sys.executable, "-m", "agent.cli", *args], ready, timeout_s, log_path) as srv:
        yield srv


@contextmanager
def ready_process(cmd: list[str], ready: str, timeout_s: float = 180.0,
                  log_path: Path | None = None) -> Iterator[dict]:
    """Run ``cmd`` from the repository root; yield {'url', 'log', 'proc'} once ``ready`` (a regex
    whose group 1 is the URL) matches a line of its output; stop it afterwards."""
    env = dict(os.environ, HF_HUB_OFFLINE="1", PYTHONUNBUFFERED="1")
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines: list[str] = []
    url: list[str] = []
    seen = threading.Event()

    def pump() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)
            m = re.search(ready, line)
            if m and not url:
                url.append(m.group(1))
                seen.set()
        seen.set()

    name = " ".join(cmd[1:4])
    threading.Thread(target=pump, daemon=True).start()
    try:
        deadline = time.monotonic() + timeout_s
        while not seen.wait(0.2):
            if time.monotonic() > deadline:
                raise TimeoutError(f"{name} did not become ready:\n" + "".join(lines[-40:]))
        if not url:
            raise RuntimeError(f"{name} exited:\n" + "".join(lines[-60:]))
        yield {"url": url[0], "log": lines, "proc": proc}
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if log_path is not None:
            log_path.write_text("".join(lines))


@contextmanager
def cadence_serve(*overrides: str, timeout_s: float = 180.0, log_path: Path | None = None) -> Iterator[dict]:
    """Run ``cadence serve --port 0`` with ``--set`` overrides until the context ends."""
    args = ["serve", "--port", "0", "--log-level", "DEBUG"]
    for item in overrides:
        args += ["--set", item]
    with cadence_process(args, r"Cadence is ready: open (http://\S+?)/ ", timeout_s, log_path) as srv:
        yield srv
