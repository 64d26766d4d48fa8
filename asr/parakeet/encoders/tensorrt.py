"""The ``tensorrt`` encoder backend: exports the FastConformer to ONNX once, builds/caches the engine.

Never run: TensorRT cannot be installed in this project's environments (see README.md). The
construction path up to the import of ``tensorrt`` is tested on the CPU.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from pathlib import Path

import torch

from asr.parakeet.encoders.base import EncoderBackend, EncoderOutput, subsampled_lengths
from asr.parakeet.encoders.fast_conformer import FastConformer
from asr.parakeet.encoders.onnx_export import export_encoder_onnx
from asr.parakeet.encoders.shape_profiles import DEFAULT_PROFILES, ShapeProfile, as_profiles
from asr.parakeet.encoders.tensorrt_engine import TensorRTEncoder, import_tensorrt

DEFAULT_CACHE = Path.home() / ".cache" / "cadence" / "tensorrt"


def weights_digest(model: torch.nn.Module) -> str:
    """sha256 over the encoder and projector weights: names the ONNX export in the cache."""
    digest = hashlib.sha256()
    for module in (model.encoder, model.encoder_projector):
        for name, tensor in sorted(module.state_dict().items()):
            digest.update(name.encode())
            digest.update(tensor.detach().float().cpu().numpy().tobytes())
    return digest.hexdigest()[:24]


class TensorRTBackend(EncoderBackend):
    name = "tensorrt"

    def __init__(
        self,
        model: torch.nn.Module,
        device: torch.device | str = "cuda",
        dtype: torch.dtype | None = None,
        profiles: Sequence[ShapeProfile] | str | None = None,
        cache_dir: str | Path | None = None,
        precision: str = "bf16",
    ) -> None:
        import_tensorrt()  # fail before the (slow) export when TensorRT is missing
        super().__init__(model, device, dtype or torch.float32)
        profiles = as_profiles(profiles, DEFAULT_PROFILES)
        cache = Path(cache_dir or DEFAULT_CACHE)
        onnx_path = cache / f"parakeet-encoder-{weights_digest(model)}.onnx"
        if not onnx_path.exists():
            fast = FastConformer(model.encoder, model.encoder_projector, dtype=torch.float32)
            export_encoder_onnx(fast, onnx_path, n_mels=model.config.encoder_config.num_mel_bins)
        self.engine = TensorRTEncoder(onnx_path, list(profiles), cache, precision, self.device)

    def encode(self, features: torch.Tensor, lengths: torch.Tensor) -> EncoderOutput:
        features = features.to(self.device, torch.float32)
        lengths = lengths.to(self.device).long()
        return EncoderOutput(
            self.engine.encode(features, lengths).to(self.dtype), subsampled_lengths(self.model, lengths)
        )
