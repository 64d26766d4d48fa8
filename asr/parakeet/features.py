"""NeMo-compatible log-mel features in torch: batched, on whatever device the module lives on.

Same recipe as NeMo's ``FilterbankFeatures`` (and transformers' ``ParakeetFeatureExtractor``):
pre-emphasis (masked past each length), centered STFT with a symmetric Hann window and zero
padding, power spectrum, slaney mel filterbank, ``log(x + 2**-24)``, per-feature normalization
over the valid frames (unbiased std, ``+1e-5``), padded frames set to 0. No dither.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn


@dataclass(frozen=True)
class FeatureConfig:
    """Front-end parameters, read from a checkpoint's preprocessor config."""

    sample_rate: int = 16000
    n_fft: int = 512
    win_length: int = 400
    hop_length: int = 160
    n_mels: int = 128
    preemphasis: float = 0.97
    log_guard: float = 2.0**-24
    normalize: str = "per_feature"  # per_feature | none

    @classmethod
    def from_hf(cls, data: dict[str, Any]) -> FeatureConfig:
        """From a transformers ``preprocessor_config.json`` dict."""
        return cls(
            sample_rate=int(data.get("sampling_rate", 16000)),
            n_fft=int(data.get("n_fft", 512)),
            win_length=int(data.get("win_length", 400)),
            hop_length=int(data.get("hop_length", 160)),
            n_mels=int(data.get("feature_size", 128)),
            preemphasis=float(data.get("preemphasis", 0.97) or 0.0),
        )

    @classmethod
    def from_nemo(cls, pre: dict[str, Any]) -> FeatureConfig:
        """From the ``preprocessor`` section of a NeMo ``model_config.yaml``."""
        sr = int(pre.get("sample_rate", 16000))
        guard = pre.get("log_zero_guard_value", 2.0**-24)
        if pre.get("log_zero_guard_type", "add") != "add" or isinstance(guard, str):
            raise ValueError("only NeMo's log_zero_guard_type 'add' with a numeric value is supported")
        return cls(
            sample_rate=sr,
            n_fft=int(pre.get("n_fft", 512)),
            win_length=round(float(pre.get("window_size", 0.025)) * sr),
            hop_length=round(float(pre.get("window_stride", 0.01)) * sr),
            n_mels=int(pre.get("features", pre.get("nfilt", 128))),
            preemphasis=float(pre.get("preemph", 0.97) or 0.0),
            log_guard=float(guard),
            normalize=str(pre.get("normalize", "per_feature") or "none"),
        )

    def to_hf(self) -> dict[str, Any]:
        """The matching transformers ``ParakeetFeatureExtractor`` keyword arguments."""
        return {
            "feature_size": self.n_mels, "sampling_rate": self.sample_rate, "hop_length": self.hop_length,
            "n_fft": self.n_fft, "win_length": self.win_length, "preemphasis": self.preemphasis,
        }

    def save_hf(self, folder: str | Path) -> Path:
        """Write ``preprocessor_config.json`` as ``ParakeetFeatureExtractor.save_pretrained`` does.

        Written directly: transformers' extractor class needs librosa just to be built, which GPU
        images often lack.
        """
        path = Path(folder) / "preprocessor_config.json"
        body = {"feature_extractor_type": "ParakeetFeatureExtractor", **self.to_hf(), "padding_side": "right",
                "padding_value": 0.0, "return_attention_mask": True}
        path.write_text(json.dumps(dict(sorted(body.items())), indent=2) + "\n")
        return path

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def slaney_mel_filterbank(config: FeatureConfig) -> np.ndarray:
    """``[n_mels, n_fft // 2 + 1]`` slaney-scale, slaney-normalized filters (librosa's defaults)."""
    from transformers.audio_utils import mel_filter_bank

    fb = mel_filter_bank(
        num_frequency_bins=config.n_fft // 2 + 1,
        num_mel_filters=config.n_mels,
        min_frequency=0.0,
        max_frequency=config.sample_rate / 2,
        sampling_rate=config.sample_rate,
        norm="slaney",
        mel_scale="slaney",
    )  # no dtype= here: transformers 5.17 (the GPU image) does not take it
    return np.ascontiguousarray(fb.T, dtype=np.float32)


class LogMelFeatures(nn.Module):
    """``(audio [B, N] float, lengths [B]) -> (features [B, frames, n_mels] float32, frame lengths [B])``."""

    def __init__(self, config: FeatureConfig | None = None) -> None:
        super().__init__()
        self.config = config or FeatureConfig()
        c = self.config
        self.register_buffer("window", torch.hann_window(c.win_length, periodic=False), persistent=False)
        self.register_buffer("filters", torch.from_numpy(slaney_mel_filterbank(c)), persistent=False)

    def frame_lengths(self, lengths: torch.Tensor) -> torch.Tensor:
        """Valid feature frames for ``lengths`` samples (NeMo's ``get_seq_len``)."""
        n_fft = self.config.n_fft
        return torch.div(lengths + n_fft // 2 * 2 - n_fft, self.config.hop_length, rounding_mode="floor").long()

    @torch.inference_mode()
    def forward(self, audio: torch.Tensor, lengths: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        c = self.config
        device = self.window.device
        audio = audio.to(device=device, dtype=torch.float32)
        if audio.dim() == 1:
            audio = audio.unsqueeze(0)
        if lengths is None:
            lengths = torch.full((audio.shape[0],), audio.shape[1], dtype=torch.long, device=device)
        lengths = torch.as_tensor(lengths, device=device).long()
        valid = torch.arange(audio.shape[1], device=device).unsqueeze(0) < lengths.unsqueeze(1)
        if c.preemphasis:
            audio = torch.cat((audio[:, :1], audio[:, 1:] - c.preemphasis * audio[:, :-1]), dim=1)
        audio = audio.masked_fill(~valid, 0.0)
        spec = torch.stft(
            audio, n_fft=c.n_fft, hop_length=c.hop_length, win_length=c.win_length, window=self.window,
            center=True, pad_mode="constant", return_complex=True,
        )
        power = torch.view_as_real(spec).pow(2).sum(-1)  # |X|^2, as sqrt(.)^2 in NeMo up to rounding
        mel = torch.log(torch.matmul(self.filters, power) + c.log_guard)  # [B, n_mels, frames]
        frames = self.frame_lengths(lengths)
        mask = torch.arange(mel.shape[-1], device=device).unsqueeze(0) < frames.unsqueeze(1)  # [B, frames]
        if c.normalize == "per_feature":
            mel = _normalize_per_feature(mel, mask, frames)
        mel = mel.masked_fill(~mask.unsqueeze(1), 0.0)
        return mel.transpose(1, 2).contiguous(), frames


def _normalize_per_feature(mel: torch.Tensor, mask: torch.Tensor, frames: torch.Tensor) -> torch.Tensor:
    m = mask.unsqueeze(1)
    count = frames.clamp(min=1).unsqueeze(1).to(mel.dtype)
    mean = torch.where(m, mel, 0.0).sum(dim=2) / count
    var = torch.where(m, mel - mean.unsqueeze(2), 0.0).pow(2).sum(dim=2) / (count - 1.0)
    std = torch.nan_to_num(var.sqrt(), nan=0.0, posinf=0.0) + 1e-5
    return (mel - mean.unsqueeze(2)) / std.unsqueeze(2)
