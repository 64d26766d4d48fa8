"""What every encoder backend is: features and lengths in, projected encoder frames and lengths out."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass

import torch


@dataclass
class EncoderOutput:
    enc_proj: torch.Tensor  # [B, T, H] joint-projected encoder output
    lengths: torch.Tensor  # [B] long, valid frames per element


def subsampled_lengths(model: torch.nn.Module, feature_lengths: torch.Tensor) -> torch.Tensor:
    """Encoder frames for ``feature_lengths`` feature frames (transformers' own formula)."""
    return model.encoder._get_subsampling_output_length(feature_lengths).long()


class EncoderBackend(ABC):
    """Owns whatever runs the encoder; callable from one thread at a time."""

    name: str = ""

    def __init__(self, model: torch.nn.Module, device: torch.device | str = "cpu",
                 dtype: torch.dtype | None = None) -> None:
        self.model = model
        self.device = torch.device(device)
        self.dtype = dtype or next(model.parameters()).dtype

    @abstractmethod
    def encode(self, features: torch.Tensor, lengths: torch.Tensor) -> EncoderOutput:
        """``features [B, F, mels]`` (float32), ``lengths [B]`` feature frames."""

    def __call__(self, features: torch.Tensor, lengths: torch.Tensor) -> EncoderOutput:
        return self.encode(features, lengths)

    def warmup(self) -> None:
        """Do the one-off work (compile, export, session start) before the first real call."""
        return None

    @property
    def joint_hidden(self) -> int:
        return int(self.model.encoder_projector.out_features)
