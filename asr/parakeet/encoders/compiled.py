"""torch.compile of transformers' encoder, one static graph per (batch, frames) shape profile.

A batch is padded only up to the cheapest profile that holds it (rows with length 0, frames of
zeros); batches wider than the widest profile are split; longer than the longest run eagerly.
Padding does not change valid frames: the encoder masks padded frames out of attention and
convolutions.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from asr import compile_cache
from asr.parakeet.encoders.base import EncoderBackend, EncoderOutput, subsampled_lengths
from asr.parakeet.encoders.eager import run_encoder
from asr.parakeet.encoders.shape_profiles import ShapeProfile, as_profiles, select_profile

# feature frames (100 a second): short windows; streaming windows of 10 s left context + chunk
# (+ right context) at three batch sizes; 30 s offline segments
DEFAULT_PROFILES = "8x256,4x1040,16x1040,32x1040,4x3008"


class CompiledEncoder(EncoderBackend):
    name = "compiled"

    def __init__(
        self,
        model: torch.nn.Module,
        device: torch.device | str = "cpu",
        dtype: torch.dtype | None = None,
        profiles: Sequence[ShapeProfile] | str | None = None,
        compile_backend: str = "inductor",
        mode: str | None = None,
    ) -> None:
        super().__init__(model, device, dtype)
        model.to(device=self.device, dtype=self.dtype).eval()
        profiles = as_profiles(profiles, DEFAULT_PROFILES)
        self.profiles = sorted(profiles, key=lambda p: (p.frames, p.batch))
        if not self.profiles:
            raise ValueError("the compiled backend needs at least one shape profile")
        self.max_batch = max(p.batch for p in self.profiles)
        limit = len(self.profiles) + 4
        torch._dynamo.config.cache_size_limit = max(torch._dynamo.config.cache_size_limit, limit)
        compile_cache.restore()
        self._compiled = torch.compile(self._forward, dynamic=False, backend=compile_backend, mode=mode)
        self.calls: dict[ShapeProfile | None, int] = {}  # per profile; None = eager fallback

    def _forward(self, features: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        return run_encoder(self.model, features, lengths)

    @torch.inference_mode()
    def encode(self, features: torch.Tensor, lengths: torch.Tensor) -> EncoderOutput:
        features = features.to(device=self.device, dtype=self.dtype)
        lengths = lengths.to(self.device).long()
        out_lengths = subsampled_lengths(self.model, lengths)
        parts = [self._encode_part(features[i : i + self.max_batch], lengths[i : i + self.max_batch])
                 for i in range(0, features.shape[0], self.max_batch)]
        frames = max(p.shape[1] for p in parts)
        enc = torch.cat([torch.nn.functional.pad(p, (0, 0, 0, frames - p.shape[1])) for p in parts])
        return EncoderOutput(enc, out_lengths)

    def _encode_part(self, features: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        b, f, mels = features.shape
        profile = select_profile(self.profiles, b, f)
        self.calls[profile] = self.calls.get(profile, 0) + 1
        if profile is None:
            return run_encoder(self.model, features, lengths)
        padded = features.new_zeros(profile.batch, profile.frames, mels)
        padded[:b, :f] = features
        padded_lengths = lengths.new_zeros(profile.batch)
        padded_lengths[:b] = lengths
        out = self._compiled(padded, padded_lengths)
        frames = int(subsampled_lengths(self.model, torch.tensor([f], device=self.device))[0])
        return out[:b, :frames]

    def warmup(self) -> None:
        """Compile every profile now (minutes for a full-size model; inductor caches the result)."""
        mels = self.model.config.encoder_config.num_mel_bins
        for p in self.profiles:
            self.encode(torch.zeros(p.batch, p.frames, mels), torch.full((p.batch,), p.frames))
        compile_cache.save("encoder-compiled")
