"""``cadence transcribe-server --engine parakeet`` on a tiny random checkpoint (CPU).

Random weights make random words, so the checks are about the pipeline: words come back on
the file's clock, ordered, inside the speech and never inside the silence the gate removed.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

from tests.offline.settings import ROOT

pytest.importorskip("torch")
pytest.importorskip("transformers")
openai = pytest.importorskip("openai")


def test_parakeet_engine_behind_the_server(tmp_path: Path) -> None:
    from asr.parakeet.tiny import make_tiny_checkpoint
    from testkit.offline_audio import speech_track, write_audio

    ckpt = make_tiny_checkpoint(tmp_path / "tiny")
    first, _ = speech_track(40, seed=3)  # longer than a 30 s window: cut with overlap
    second, _ = speech_track(15, seed=4)
    audio = np.concatenate([first, np.zeros(20 * 16000, np.float32), second])
    path = write_audio(tmp_path / "call.flac", audio, 16000)

    cmd = [sys.executable, "-m", "agent.cli", "transcribe-server", "--engine", "parakeet", "--model", str(ckpt),
           "--device", "cpu", "--port", "0", "--log-level", "WARNING"]
    proc = subprocess.Popen(cmd, cwd=ROOT, env=dict(os.environ, PYTHONUNBUFFERED="1"), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    url: list[str] = []
    lines: list[str] = []

    def pump() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)
            if m := re.search(r"ready: (http://\S+)/v1 \(model (\S+);", line):
                url.append(m.group(1))

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    try:
        for _ in range(600):
            if url or proc.poll() is not None:
                break
            reader.join(0.1)
        assert url, "".join(lines[-30:])
        client = openai.OpenAI(base_url=url[0] + "/v1", api_key="unused", max_retries=0, timeout=120)
        result = client.audio.transcriptions.create(model="tiny", file=path, response_format="verbose_json",
                                                    timestamp_granularities=["word"])
    finally:
        proc.terminate()
        proc.wait(timeout=15)
    assert abs(result.duration - 75.0) < 0.01
    words = result.words
    assert len(words) > 20
    starts = [w.start for w in words]
    assert starts == sorted(starts)
    silence = (40.0 + 0.5, 60.0 - 0.5)
    assert not [w for w in words if silence[0] < w.start < silence[1]]
    assert any(w.start > 60.0 for w in words) and all(w.end <= 75.0 + 1e-6 for w in words)
