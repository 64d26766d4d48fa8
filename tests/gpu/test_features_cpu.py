"""GPU log-mel features equal transformers' ParakeetFeatureExtractor math (CPU run of the same ops)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from asr.parakeet.gpu.log_mel import LogMel, feature_frames, slaney_mel_filters


def test_slaney_filters_match_transformers_mel_filter_bank() -> None:
    audio_utils = pytest.importorskip("transformers.audio_utils")
    ours = slaney_mel_filters(16000, 512, 128)
    ref = audio_utils.mel_filter_bank(
        num_frequency_bins=257,
        num_mel_filters=128,
        min_frequency=0.0,
        max_frequency=8000.0,
        sampling_rate=16000,
        norm="slaney",
        mel_scale="slaney",
    ).T
    assert ours.shape == ref.shape == (128, 257)
    assert np.allclose(ours, ref, atol=1e-6, rtol=1e-4)


def test_slaney_filters_match_librosa_when_installed() -> None:
    librosa = pytest.importorskip("librosa")
    ref = librosa.filters.mel(sr=16000, n_fft=512, n_mels=128, fmin=0.0, fmax=8000.0, norm="slaney")
    assert np.allclose(slaney_mel_filters(), ref, atol=1e-7)


def _reference(audio: torch.Tensor, lengths: torch.Tensor, filters: np.ndarray) -> torch.Tensor:
    """transformers' ParakeetFeatureExtractor.__call__ after padding, transcribed (float64)."""
    x = audio.double()
    mask = torch.arange(x.shape[1])[None] < lengths[:, None]
    x = torch.cat([x[:, :1], x[:, 1:] - 0.97 * x[:, :-1]], dim=1).masked_fill(~mask, 0.0)
    win = torch.hann_window(400, periodic=False, dtype=torch.float64)
    spec = torch.stft(
        x, 512, hop_length=160, win_length=400, window=win, return_complex=True, pad_mode="constant"
    )
    mag = torch.sqrt(torch.view_as_real(spec).pow(2).sum(-1)).pow(2)
    mel = torch.log(torch.from_numpy(filters).double() @ mag + 2.0**-24).permute(0, 2, 1)
    flen = lengths // 160
    fmask = (torch.arange(mel.shape[1])[None] < flen[:, None]).unsqueeze(-1)
    masked = mel * fmask
    mean = (masked.sum(1) / flen[:, None]).unsqueeze(1)
    var = ((masked - mean) ** 2 * fmask).sum(1) / (flen - 1)[:, None]
    return ((mel - mean) / (torch.sqrt(var).unsqueeze(1) + 1e-5)) * fmask


def test_log_mel_matches_reference_with_padding() -> None:
    gen = torch.Generator().manual_seed(0)
    audio = torch.randn(3, 16000, generator=gen) * 0.1
    lengths = torch.tensor([16000, 9000, 1000])
    audio = audio * (torch.arange(16000)[None] < lengths[:, None])
    feats, frames = LogMel()(audio, lengths)
    want = _reference(audio, lengths, slaney_mel_filters())
    assert feats.shape == (3, feature_frames(16000), 128)
    assert frames.tolist() == [100, 56, 6]
    assert torch.allclose(feats.double(), want, atol=2e-3), (feats.double() - want).abs().max()
    assert float(feats[1, 56:].abs().max()) == 0.0
