"""NeMo-compatible log-mel features as pure tensor ops, so they run (and graph-capture) on the GPU.

Matches transformers' ``ParakeetFeatureExtractor``: pre-emphasis 0.97 on valid samples, centred
STFT (n_fft 512, symmetric Hann 400, hop 160, zero padding), power spectrum, slaney mel filters
(librosa's float32 construction, re-derived here so no librosa is needed), ``log(x + 2**-24)``,
per-feature normalisation over valid frames (ddof=1, ``std + 1e-5``), padded frames zeroed.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

LOG_GUARD = 2.0**-24
EPSILON = 1e-5


def _hz_to_mel(freqs: np.ndarray) -> np.ndarray:
    f_sp = 200.0 / 3
    mels = freqs / f_sp
    min_log_hz, min_log_mel, logstep = 1000.0, 1000.0 / f_sp, np.log(6.4) / 27.0
    return np.where(
        freqs >= min_log_hz, min_log_mel + np.log(np.maximum(freqs, 1e-10) / min_log_hz) / logstep, mels
    )


def _mel_to_hz(mels: np.ndarray) -> np.ndarray:
    f_sp = 200.0 / 3
    freqs = f_sp * mels
    min_log_hz, min_log_mel, logstep = 1000.0, 1000.0 / f_sp, np.log(6.4) / 27.0
    return np.where(mels >= min_log_mel, min_log_hz * np.exp(logstep * (mels - min_log_mel)), freqs)


def slaney_mel_filters(sample_rate: int = 16000, n_fft: int = 512, n_mels: int = 128) -> np.ndarray:
    """(n_mels, n_fft//2+1) float32 slaney-scale, slaney-normalised triangles, as ``librosa.filters.mel``."""
    fft_freqs = np.fft.rfftfreq(n=n_fft, d=1.0 / sample_rate)
    edges = np.linspace(_hz_to_mel(np.array(0.0)), _hz_to_mel(np.array(sample_rate / 2.0)), n_mels + 2)
    mel_f = _mel_to_hz(edges)
    fdiff = np.diff(mel_f)
    ramps = np.subtract.outer(mel_f, fft_freqs)
    weights = np.zeros((n_mels, 1 + n_fft // 2), dtype=np.float32)
    for i in range(n_mels):
        lower = -ramps[i] / fdiff[i]
        upper = ramps[i + 2] / fdiff[i + 1]
        weights[i] = np.maximum(0, np.minimum(lower, upper))
    weights *= (2.0 / (mel_f[2 : n_mels + 2] - mel_f[:n_mels]))[:, None]
    return weights


def feature_frames(samples: int, hop: int = 160) -> int:
    """STFT frames for ``samples`` of audio (centred STFT): ``samples // hop + 1``."""
    return samples // hop + 1


class LogMel(nn.Module):
    """(B, N) float audio + (B,) sample lengths -> (B, N//hop+1, n_mels) float32 features + (B,) frame lengths."""

    def __init__(
        self,
        n_mels: int = 128,
        sample_rate: int = 16000,
        n_fft: int = 512,
        win_length: int = 400,
        hop_length: int = 160,
        preemphasis: float = 0.97,
    ) -> None:
        super().__init__()
        self.n_fft, self.hop, self.preemphasis = n_fft, hop_length, preemphasis
        self.register_buffer("window", torch.hann_window(win_length, periodic=False), persistent=False)
        filters = torch.from_numpy(slaney_mel_filters(sample_rate, n_fft, n_mels))
        self.register_buffer("filters", filters, persistent=False)

    def forward(self, audio: torch.Tensor, lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        audio = audio.float()
        sample_idx = torch.arange(audio.shape[1], device=audio.device)
        if self.preemphasis:
            audio = torch.cat([audio[:, :1], audio[:, 1:] - self.preemphasis * audio[:, :-1]], dim=1)
            audio = audio * (sample_idx[None, :] < lengths[:, None])
        spec = torch.stft(
            audio,
            self.n_fft,
            hop_length=self.hop,
            win_length=self.window.shape[0],
            window=self.window,
            return_complex=True,
            pad_mode="constant",
        )
        power = torch.view_as_real(spec).pow(2).sum(-1)  # (B, F, T)
        mel = torch.log(torch.matmul(self.filters, power) + LOG_GUARD).transpose(1, 2)  # (B, T, n_mels)
        frames = torch.div(lengths, self.hop, rounding_mode="floor")
        mask = (torch.arange(mel.shape[1], device=mel.device)[None, :] < frames[:, None]).unsqueeze(-1)
        count = frames.clamp(min=1).unsqueeze(-1).to(mel.dtype)
        masked = mel * mask
        mean = masked.sum(dim=1) / count
        var = ((masked - mean[:, None]) ** 2 * mask).sum(dim=1) / (count - 1).clamp(min=1)
        feats = (mel - mean[:, None]) / (var.sqrt()[:, None] + EPSILON)
        return feats * mask, frames
