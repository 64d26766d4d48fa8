"""``bench/parakeet_checkpoint.py --calibrate-on``: a prompts pack becomes the 16 kHz batch the calibration encodes
(``agent.capacity.corpus.pack_audio_16k``)."""

from __future__ import annotations

import wave
from pathlib import Path

import numpy as np


def _wav(path: Path, seconds: float, freq: float) -> Path:
    t = np.arange(int(8000 * seconds)) / 8000
    pcm = (0.3 * np.sin(2 * np.pi * freq * t) * 32767).astype("<i2")
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(8000)
        w.writeframes(pcm.tobytes())
    return path


def test_pack_becomes_padded_16k_rows_with_their_lengths(tmp_path):
    from agent.capacity.corpus import pack_audio_16k, write_ulaw_pack

    pack = write_ulaw_pack(tmp_path / "p.npz", [_wav(tmp_path / "a.wav", 1.0, 300.0),
                                                _wav(tmp_path / "b.wav", 0.5, 500.0)])
    audio, samples = pack_audio_16k(pack)
    assert audio.shape == (2, 16000) and samples.tolist() == [16000, 8000]  # 8 kHz upsampled 2x
    assert float(np.abs(audio[1, 8000:]).max()) == 0.0  # the shorter row is zero-padded
    # the tone survives mu-law and the upsampler: about 0.3 of full scale
    assert 0.25 < float(np.abs(audio[0, 1000:15000]).max()) < 0.35
