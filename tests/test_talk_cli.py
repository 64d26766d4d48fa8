"""``cadence talk`` on real speech, and bad input files, through the real command line."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import wave
from pathlib import Path

import numpy as np
import pytest
import soxr

from testkit.corpus import pick, wer
from transports.audio_io import AudioFileError, load_audio

ROOT = Path(__file__).resolve().parent.parent


def cadence(*args: str, timeout: float = 240) -> subprocess.CompletedProcess:
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    return subprocess.run([sys.executable, "-m", "agent.cli", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout)


def write_wav(path: Path, audio: np.ndarray, rate: int, channels: int = 1) -> Path:
    pcm = (np.clip(audio, -1, 1) * 32767).astype("<i2")
    if channels == 2:
        pcm = np.stack([pcm, pcm // 2], axis=1).reshape(-1)
    with wave.open(str(path), "wb") as w:
        w.setnchannels(channels)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(pcm.tobytes())
    return path


def test_talk_one_turn_on_real_speech_from_a_44k_stereo_file(tmp_path):
    prompt = pick(["agent-pass"])[0]
    audio = load_audio(prompt.path, 44100)
    wav = write_wav(tmp_path / "caller.wav", audio, 44100, channels=2)
    out = tmp_path / "reply.wav"
    proc = cadence("talk", str(wav), "--out", str(out))
    assert proc.returncode == 0, proc.stderr[-3000:]
    heard = re.search(r"transcript: (['\"])(.*)\1", proc.stdout).group(2)
    assert wer(prompt.text, heard) <= 0.35, heard
    assert re.search(r"reply:\s+(['\"]).+\1", proc.stdout)
    first_audio = re.search(r"eos_to_first_audio\s+(\d+)", proc.stdout)
    assert first_audio and 0 < int(first_audio.group(1)) < 10000, proc.stdout
    with wave.open(str(out)) as w:
        reply = np.frombuffer(w.readframes(w.getnframes()), dtype="<i2")
        assert w.getnframes() / w.getframerate() > 0.5
    assert int(np.abs(reply).max()) > 1000, "the reply WAV is silence"


@pytest.mark.parametrize("rate", [8000, 44100])
def test_wrong_rates_and_stereo_are_resampled_not_rejected(tmp_path, rate):
    prompt = pick(["agent-pass"])[0]
    ref = load_audio(prompt.path, 16000)
    src = soxr.resample(ref, 16000, rate)
    for channels in (1, 2):
        path = write_wav(tmp_path / f"x{rate}_{channels}.wav", src, rate, channels)
        got = load_audio(path, 16000)
        assert abs(len(got) - len(ref)) <= 16000 * 0.01
        n = min(len(got), len(ref))
        scale = 0.75 if channels == 2 else 1.0  # the stereo file's right channel is half as loud
        corr = np.corrcoef(got[:n], ref[:n] * scale)[0, 1]
        assert corr > 0.95


def test_bad_files_get_one_clear_line(tmp_path):
    empty = tmp_path / "empty.wav"
    empty.write_bytes(b"")
    text = tmp_path / "notes.wav"
    text.write_text("this is not audio\n" * 50)
    for path, reason in [(empty, "empty"), (text, "not a readable audio file"),
                         (tmp_path / "missing.wav", "no such file")]:
        with pytest.raises(AudioFileError, match=reason):
            load_audio(path)
        proc = cadence("talk", str(path), timeout=60)
        assert proc.returncode == 2
        assert "cadence: error:" in proc.stderr and reason in proc.stderr
        assert "Traceback" not in proc.stderr


def test_talk_with_the_parakeet_engine_on_a_tiny_random_checkpoint(tmp_path):
    """The whole cascade with asr.engine = parakeet: the words are nonsense, the plumbing is real."""
    ckpt = tmp_path / "tiny-parakeet"
    made = cadence("asr", "tiny", str(ckpt), timeout=120)
    assert made.returncode == 0, made.stderr[-2000:]
    out = tmp_path / "reply.wav"
    proc = cadence("talk", str(pick(["agent-pass"])[0].path), "--out", str(out),
                   "--set", "asr.engine=parakeet", "--set", f"asr.model={ckpt}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    heard = re.search(r"transcript: (['\"])(.*)\1", proc.stdout).group(2)
    assert heard.strip(), "the parakeet engine produced no transcript"
    eos_to_transcript = re.search(r"eos_to_transcript\s+(\d+)", proc.stdout)
    assert eos_to_transcript and int(eos_to_transcript.group(1)) < 5000
    assert out.stat().st_size > 44
