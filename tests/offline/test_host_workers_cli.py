"""``cadence transcribe-server --workers 2`` as a user runs it: a dead worker is replaced, and
SIGTERM, Ctrl-C (SIGINT) or even SIGKILL of the server leaves no child process behind."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import httpx
import pytest

from testkit.servers import cadence_process

READY = r"transcription server ready: (http://\S+)/v1 .*2 host worker processes"


def children(pid: int) -> list[int]:
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            found.append(int(stat.parent.name))
    return found


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def wait_for(check, timeout_s: float) -> bool:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.1)
    return check()


def transcribe(url: str, path: Path) -> str:
    with path.open("rb") as f:
        r = httpx.post(url + "/v1/audio/transcriptions", files={"file": f}, data={"model": "whisper-1"}, timeout=60)
    assert r.status_code == 200, r.text
    return r.json()["text"]


@pytest.fixture(scope="module")
def prompt(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from testkit.corpus import prompts

    return prompts(min_words=5)[0].path


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGKILL])
def test_no_worker_outlives_the_server(sig: signal.Signals, prompt: Path) -> None:
    with cadence_process(["transcribe-server", "--port", "0", "--workers", "2", "--log-level", "WARNING"],
                         READY, timeout_s=60) as srv:
        proc = srv["proc"]
        workers = children(proc.pid)
        assert len(workers) == 2, workers
        assert transcribe(srv["url"], prompt)
        if sig == signal.SIGTERM:  # a worker that dies is replaced, and the server keeps answering
            os.kill(workers[0], signal.SIGKILL)
            assert wait_for(lambda: len([p for p in children(proc.pid) if p not in workers]) == 1, 30)
            assert wait_for(lambda: len(children(proc.pid)) == 2 and not alive(workers[0]), 10)
            for _ in range(4):
                assert transcribe(srv["url"], prompt)
            workers = children(proc.pid)
        os.kill(proc.pid, sig)
        proc.wait(timeout=30)
        assert wait_for(lambda: not any(alive(p) for p in workers), 10), [p for p in workers if alive(p)]
        if sig != signal.SIGKILL:
            assert proc.returncode == 0
            assert not list(Path("/dev/shm").glob(f"cadence-asr-{proc.pid}-*"))
