"""``bench/parakeet_checkpoint.py --calibrate-on``: a prompts pack becomes the 16 kHz batch the calibration encodes."""

from __future__ import annotations

import sys
import wave
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch")
ROOT = Path(__file__).resolve().parents[2]


def _wav(path: Path, seconds: float, freq: float) -> Path:
    t = np.arange(int(8000 * seconds)) / 8000
    pcm = (0.3 * np.sin(2 * np.pi * freq * t) * 32767).astype("<i2")
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(8000)
        w.writeframes(pcm.tobytes())
    return path


def test_pack_becomes_padded_16k_rows_with_their_lengths(tmp_path, monkeypatch):
    from agent.capacity.corpus import write_ulaw_pack

    monkeypatch.syspath_prepend(str(ROOT))
    sys.modules.pop("bench.parakeet_checkpoint", None)
    from bench.parakeet_checkpoint import prompt_audio

    pack = write_ulaw_pack(tmp_path / "p.npz", [_wav(tmp_path / "a.wav", 1.0, 300.0),
                                                _wav(tmp_path / "b.wav", 0.5, 500.0)])
    audio, samples = prompt_audio(pack)
    assert audio.shape == (2, 16000) and samples.tolist() == [16000, 8000]  # 8 kHz upsampled 2x
    assert float(audio[1, 8000:].abs().max()) == 0.0  # the shorter row is zero-padded
    # the tone survives mu-law and the upsampler: about 0.3 of full scale
    assert 0.25 < float(audio[0, 1000:15000].abs().max()) < 0.35
