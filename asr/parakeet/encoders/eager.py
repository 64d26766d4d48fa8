"""transformers' Parakeet encoder (and the joint's encoder projection) run as they are."""

from __future__ import annotations

import torch

from asr.parakeet.encoders.base import EncoderBackend, EncoderOutput, subsampled_lengths


def run_encoder(model: torch.nn.Module, features: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """Projected encoder output of ``model`` for padded ``features`` (no grad, model's dtype)."""
    mask = torch.arange(features.shape[1], device=features.device).unsqueeze(0) < lengths.unsqueeze(1)
    hidden = model.encoder(input_features=features, attention_mask=mask).last_hidden_state
    return model.encoder_projector(hidden)


class EagerEncoder(EncoderBackend):
    """fp32 or bf16 eager PyTorch; the reference every other backend is compared with."""

    name = "eager"

    def __init__(self, model: torch.nn.Module, device: torch.device | str = "cpu",
                 dtype: torch.dtype | None = None) -> None:
        super().__init__(model, device, dtype)
        model.to(device=self.device, dtype=self.dtype).eval()

    @torch.inference_mode()
    def encode(self, features: torch.Tensor, lengths: torch.Tensor) -> EncoderOutput:
        features = features.to(device=self.device, dtype=self.dtype)
        lengths = lengths.to(self.device)
        return EncoderOutput(run_encoder(self.model, features, lengths), subsampled_lengths(self.model, lengths))
