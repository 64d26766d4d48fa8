"""NeMo-compatible log-mel features against transformers' ParakeetFeatureExtractor on real speech."""

from __future__ import annotations

import wave
from pathlib import Path

import numpy as np
import pytest
import torch

from asr.parakeet.features import FeatureConfig, LogMelFeatures

SOUNDS = Path("/usr/share/asterisk/sounds/en_US_f_Allison")
TOLERANCE = 1e-4


def _speech(count: int) -> list[np.ndarray]:
    """A few real recordings (8 kHz Asterisk prompts) resampled to 16 kHz."""
    soxr = pytest.importorskip("soxr")
    files = sorted(SOUNDS.glob("*.wav"))[:count] if SOUNDS.is_dir() else []
    if len(files) < count:
        pytest.skip(f"real speech not installed ({SOUNDS}: asterisk-core-sounds-en-wav)")
    clips = []
    for f in files:
        with wave.open(str(f)) as w:
            assert w.getsampwidth() == 2 and w.getnchannels() == 1
            pcm = np.frombuffer(w.readframes(w.getnframes()), dtype=np.int16).astype(np.float32) / 32768
            rate = w.getframerate()
        clips.append(soxr.resample(pcm, rate, 16000).astype(np.float32))
    return clips


def _reference(clips: list[np.ndarray]):
    from transformers import ParakeetFeatureExtractor

    fe = ParakeetFeatureExtractor(**FeatureConfig().to_hf())
    out = fe(clips, sampling_rate=16000, return_tensors="pt", return_attention_mask=True)
    return out["input_features"], out["attention_mask"]


def _ours(clips: list[np.ndarray]):
    lengths = torch.tensor([len(c) for c in clips])
    audio = torch.zeros(len(clips), int(lengths.max()))
    for i, c in enumerate(clips):
        audio[i, : len(c)] = torch.from_numpy(c)
    return LogMelFeatures()(audio, lengths)


def test_matches_transformers_on_real_speech_batched():
    clips = _speech(6)
    ref, mask = _reference(clips)
    ours, frames = _ours(clips)
    assert ours.shape == ref.shape
    assert torch.equal(frames, mask.sum(-1))
    diff = (ours - ref).abs().max().item()
    assert diff < TOLERANCE, f"max |diff| {diff:.2e}"
    assert ours.abs().max() > 1.0  # normalized features, not all zeros


def test_batching_does_not_change_any_element():
    """Equal up to FFT rounding, which per-feature normalization magnifies in the empty bands above
    4 kHz of these (8 kHz-sourced) recordings: nearly all values within 1e-4, none off by 0.05."""
    clips = _speech(4)
    together, frames = _ours(clips)
    for i, clip in enumerate(clips):
        alone, n = _ours([clip])
        diff = (together[i, : int(n[0])] - alone[0, : int(n[0])]).abs()
        assert (diff < 1e-4).float().mean() > 0.99 and diff.max() < 0.05
        assert torch.all(together[i, int(frames[i]) :] == 0)


def test_nemo_and_hf_configs_agree():
    nemo = {"sample_rate": 16000, "window_size": 0.025, "window_stride": 0.01, "features": 128, "n_fft": 512,
            "normalize": "per_feature", "dither": 1e-5, "pad_to": 0}
    assert FeatureConfig.from_nemo(nemo) == FeatureConfig()
    assert FeatureConfig.from_hf(FeatureConfig().to_hf()) == FeatureConfig()


def test_one_frame_input_does_not_produce_nan():
    feats, frames = LogMelFeatures()(torch.randn(1, 200) * 0.1, torch.tensor([200]))
    assert int(frames[0]) == 1
    assert torch.isfinite(feats).all()
