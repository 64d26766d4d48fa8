"""``cadence transcribe-ray DIR`` on a local Ray cluster (CPU): a small corpus, one bad file."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.corpus import wer
from tests.offline.settings import ROOT

pytest.importorskip("ray")


def test_corpus_on_a_local_ray_cluster(tmp_path: Path, prompt_files: list[tuple[Path, str]]) -> None:
    corpus, out = tmp_path / "calls", tmp_path / "out"
    (corpus / "monday").mkdir(parents=True)
    refs = {}
    for i, (path, text) in enumerate(prompt_files[:4]):
        rel = Path("monday" if i % 2 else ".") / f"call{i}.wav"
        shutil.copy(path, corpus / rel)
        refs[rel.with_suffix(".srt")] = text
    (corpus / "broken.wav").write_bytes(b"RIFF....WAVEjunk")
    env = dict(os.environ, HF_HUB_OFFLINE="1", RAY_DEDUP_LOGS="0")
    proc = subprocess.run(
        [sys.executable, "-m", "agent.cli", "transcribe-ray", str(corpus), "--out", str(out), "--format", "srt",
         "--workers", "1", "--files-per-batch", "2", "--log-level", "WARNING"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 1, proc.stdout + proc.stderr  # one file failed, and the exit code says so
    assert "transcribed 4/5 files" in proc.stdout and "broken.wav" in proc.stdout
    for rel, text in refs.items():
        srt = (out / rel).read_text()
        assert srt.startswith("1\n00:00:00,"), srt
        body = " ".join(line for line in srt.splitlines() if line and "-->" not in line and not line.isdigit())
        assert wer(text, body) < 0.25, (text, body)
    assert not (out / "broken.srt").exists()
