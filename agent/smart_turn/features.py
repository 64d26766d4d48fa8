"""smart-turn v3's input on the device, batched: the last 8 s of each request, Whisper log-mel features.

The same steps as pipecat's ``LocalSmartTurnAnalyzerV3._predict_endpoint`` and its vendored
``compute_whisper_log_mel_features`` (keep the last 8 s or pad zeros in front; zero-mean unit-variance over
the 8 s; centered 400-point STFT, hop 160, periodic Hann; Slaney mel filters; log10; each row floored at its
maximum - 8; (x + 4) / 4; the last frame dropped), in float32 on the model's device instead of float64 numpy.
"""

from __future__ import annotations

import numpy as np
import torch

SAMPLE_RATE = 16000
WINDOW_S = 8
SAMPLES = SAMPLE_RATE * WINDOW_S
N_FFT, HOP = 400, 160


def last_window(audio: np.ndarray) -> np.ndarray:
    """The last 8 s of 16 kHz float32 ``audio``, zeros in front when shorter (pipecat's truncation)."""
    audio = np.asarray(audio, dtype=np.float32).reshape(-1)
    if audio.size >= SAMPLES:
        return audio[-SAMPLES:]
    out = np.zeros(SAMPLES, np.float32)
    out[SAMPLES - audio.size:] = audio
    return out


def mel_filters(n_mels: int = 80, sample_rate: int = SAMPLE_RATE, n_fft: int = N_FFT) -> np.ndarray:
    """Whisper's Slaney-normalized triangular mel filters, ``[n_mels, n_fft // 2 + 1]`` (transformers'
    ``mel_filter_bank(..., norm="slaney", mel_scale="slaney")``; the engine process needs no pipecat)."""
    def to_mel(f: np.ndarray) -> np.ndarray:
        f = np.atleast_1d(np.asarray(f, np.float64))
        return np.where(f >= 1000.0, 15.0 + np.log(np.maximum(f, 1e-9) / 1000.0) * (27.0 / np.log(6.4)), 3.0 * f / 200.0)

    def to_hz(m: np.ndarray) -> np.ndarray:
        return np.where(m >= 15.0, 1000.0 * np.exp(np.log(6.4) / 27.0 * (m - 15.0)), 200.0 * m / 3.0)

    edges = to_hz(np.linspace(to_mel(0.0)[0], to_mel(sample_rate / 2)[0], n_mels + 2))
    bins = np.linspace(0, sample_rate // 2, n_fft // 2 + 1)
    slopes = edges[None, :] - bins[:, None]
    down = -slopes[:, :-2] / np.diff(edges)[:-1]
    up = slopes[:, 2:] / np.diff(edges)[1:]
    filters = np.maximum(0.0, np.minimum(down, up)) * (2.0 / (edges[2:] - edges[:-2]))[None, :]
    return filters.T


class LogMel:
    """Log-mel features ``[B, 80, 800]`` of ``[B, 128000]`` audio, on ``device``."""

    def __init__(self, device: torch.device | str = "cpu"):
        self.device = torch.device(device)
        self.filters = torch.as_tensor(mel_filters(), dtype=torch.float32, device=self.device)
        self.window = torch.hann_window(N_FFT, periodic=True, dtype=torch.float32, device=self.device)

    def __call__(self, audio: torch.Tensor) -> torch.Tensor:
        audio = audio.to(self.device, torch.float32)
        mean = audio.mean(dim=1, keepdim=True)
        var = audio.var(dim=1, unbiased=False, keepdim=True)
        x = (audio - mean) / torch.sqrt(var + 1e-7)
        spec = torch.stft(x, N_FFT, HOP, window=self.window, center=True, pad_mode="reflect", return_complex=True)
        power = spec.real.square() + spec.imag.square()  # [B, 201, 801]
        mel = torch.clamp(self.filters @ power, min=1e-10).log10()[:, :, :-1]
        floor = mel.amax(dim=(1, 2), keepdim=True) - 8.0
        return (torch.maximum(mel, floor) + 4.0) / 4.0
