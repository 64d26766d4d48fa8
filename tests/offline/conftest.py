"""A real ``cadence transcribe-server`` (embedded Whisper) shared by the client tests."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.offline.settings import ROOT, UPLOAD_LIMIT_MB


@pytest.fixture(scope="session")
def server_url() -> Iterator[str]:
    cmd = [sys.executable, "-m", "agent.cli", "transcribe-server", "--port", "0", "--log-level", "WARNING",
           "--max-upload-mb", str(UPLOAD_LIMIT_MB)]
    env = dict(os.environ, HF_HUB_OFFLINE="1", PYTHONUNBUFFERED="1")
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines: list[str] = []
    found: list[str] = []
    ready = threading.Event()

    def pump() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)
            m = re.search(r"transcription server ready: (http://\S+)/v1 ", line)
            if m:
                found.append(m.group(1))
                ready.set()
        ready.set()

    threading.Thread(target=pump, daemon=True).start()
    try:
        deadline = time.monotonic() + 120
        while not ready.wait(0.2):
            if time.monotonic() > deadline:
                pytest.fail("transcribe-server did not start:\n" + "".join(lines[-40:]))
        if not found:
            pytest.fail("transcribe-server exited:\n" + "".join(lines[-60:]))
        yield found[0]
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture(scope="session")
def prompt_files(tmp_path_factory: pytest.TempPathFactory) -> list[tuple[Path, str]]:
    """Eight real prompts of five words or more, as 8 kHz WAV files, with their texts."""
    from tests.corpus import prompts

    chosen = prompts(min_words=5)[:8]
    return [(p.path, p.text) for p in chosen]
