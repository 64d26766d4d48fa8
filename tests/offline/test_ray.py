"""``cadence transcribe-ray DIR`` on a local Ray cluster (CPU): a small corpus, one bad file."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from testkit.corpus import wer
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


def test_cadence_transcribe_ray_runs_the_parakeet_engine_of_the_in_process_pipeline(
        tmp_path: Path, prompt_files: list[tuple[Path, str]]) -> None:
    """``cadence transcribe --ray DIR``: the Parakeet job's transcripts equal the same engine run in-process."""
    import json

    from asr.offline.decode import decode_file
    from asr.offline.engine_factory import make_engine
    from asr.offline.formats import render
    from asr.offline.transcriber import transcribe_corpus
    from asr.offline.window_engine import EngineSpec
    from asr.parakeet.tiny import make_tiny_checkpoint

    model = make_tiny_checkpoint(tmp_path / "tiny", vocab_size=256, layers=2, seed=3)
    corpus, out = tmp_path / "calls", tmp_path / "out"
    (corpus / "tuesday").mkdir(parents=True)
    picked = [path for path, _ in prompt_files[:3]]
    for i, path in enumerate(picked):
        shutil.copy(path, corpus / ("tuesday" if i else ".") / f"call{i}.wav")
    env = dict(os.environ, HF_HUB_OFFLINE="1", RAY_DEDUP_LOGS="0")
    proc = subprocess.run(
        [sys.executable, "-m", "agent.cli", "transcribe", "--ray", str(corpus), "--model", str(model),
         "--output-dir", str(out), "--format", "json", "--files-per-batch", "1"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "transcribed 3/3 files" in proc.stdout, proc.stdout

    engine = make_engine(EngineSpec(engine="parakeet", model=str(model), max_batch=8))
    texts = []
    for i, path in enumerate(picked):
        (want,) = transcribe_corpus(engine, [decode_file(str(path), engine.sample_rate)], None)
        got = (out / ("tuesday" if i else ".") / f"call{i}.json").read_text()
        assert json.loads(got)["text"] == json.loads(render(want, "json")[0])["text"]
        texts.append(want.text)
    assert all(texts) and len(set(texts)) == 3  # random weights still emit, and per-file texts differ


def test_cadence_transcribe_ray_needs_an_output_dir(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "agent.cli", "transcribe", "--ray", str(tmp_path)],
                          cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "--output-dir is required" in proc.stderr
