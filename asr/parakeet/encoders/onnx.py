"""The encoder exported to ONNX (dynamic batch and frames) and run on onnxruntime.

The export wraps transformers' encoder modules with positional encodings pre-extended to the
model's maximum length (a table sliced in-graph, nothing data-dependent), takes ``(features,
lengths)``, and returns the joint-projected frames and their lengths. Weights go to external
data when the model is large (protobuf's 2 GB limit). Exports are cached by weight digest.
"""

from __future__ import annotations

import copy
import hashlib
import os
import shutil
import tempfile
import warnings
from pathlib import Path

import numpy as np
import torch
from torch import nn

from asr.parakeet._deps import require
from asr.parakeet.encoders.base import EncoderBackend, EncoderOutput, subsampled_lengths

EXTERNAL_DATA_BYTES = 1 << 30  # weights above this go to <name>.onnx.data


class ExportableEncoder(nn.Module):
    """``(features [B, F, mels] f32, lengths [B] i64) -> (enc_proj [B, T, H] f32, lengths [B] i64)``."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.encoder = model.encoder
        self.projector = model.encoder_projector
        self.max_len = int(model.config.encoder_config.max_position_embeddings)
        table = self.encoder.encode_positions(torch.zeros(1, self.max_len, 1))[0]  # rows: L-1 .. -(L-1)
        self.pos_table = nn.Parameter(table.float(), requires_grad=False)  # an initializer, not a Constant

    def forward(self, features: torch.Tensor, lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        enc = self.encoder
        frames = torch.arange(features.shape[1], device=features.device)
        hidden = enc.subsampling(features, frames.unsqueeze(0) < lengths.unsqueeze(1))
        hidden = hidden * enc.input_scale
        t = torch._shape_as_tensor(hidden)[1]
        index = torch.arange(2 * t - 1, device=hidden.device) + (self.max_len - t)
        positions = self.pos_table.index_select(0, index).to(hidden.dtype)
        positions = positions.unsqueeze(0).expand(hidden.shape[0], -1, -1)
        out_lengths = enc._get_subsampling_output_length(lengths).long()
        valid = torch.arange(hidden.shape[1], device=hidden.device).unsqueeze(0) < out_lengths.unsqueeze(1)
        mask = valid.unsqueeze(1).expand(-1, hidden.shape[1], -1)
        mask = (mask & mask.transpose(1, 2)).unsqueeze(1)
        for layer in enc.layers:
            hidden = layer(hidden, attention_mask=mask, position_embeddings=positions)
        return self.projector(hidden), out_lengths


def weights_digest(model: nn.Module) -> str:
    digest = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        digest.update(name.encode())
        digest.update(tensor.detach().float().cpu().numpy().tobytes())
    return digest.hexdigest()[:16]


def export_encoder(model: nn.Module, path: str | Path, external_data: bool | None = None, opset: int = 17) -> Path:
    """Export ``model``'s encoder (fp32, CPU copy, eager attention) to ``path``."""
    onnx = require("onnx")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    work = copy.deepcopy(model).float().cpu().eval()
    work.config._attn_implementation = "eager"
    work.encoder.config._attn_implementation = "eager"
    module = ExportableEncoder(work).eval()
    mels = work.config.encoder_config.num_mel_bins
    features = torch.randn(2, 203, mels)
    lengths = torch.tensor([203, 120])
    tmp = Path(tempfile.mkdtemp(prefix="cadence-onnx-"))
    try:
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the TorchScript exporter's tracer and folding chatter
            torch.onnx.export(
                module, (features, lengths), str(tmp / "encoder.onnx"),
                input_names=["features", "lengths"], output_names=["enc_proj", "enc_lengths"],
                dynamic_axes={"features": {0: "batch", 1: "frames"}, "lengths": {0: "batch"},
                              "enc_proj": {0: "batch", 1: "enc_frames"}, "enc_lengths": {0: "batch"}},
                opset_version=opset, dynamo=False,
            )
        size = sum(p.numel() * 4 for p in work.parameters())
        if external_data is None:
            external_data = size > EXTERNAL_DATA_BYTES
        graph = onnx.load(str(tmp / "encoder.onnx"))
        data_file = path.with_name(path.name + ".data")
        if data_file.exists():
            data_file.unlink()
        if external_data:
            onnx.save_model(graph, str(path), save_as_external_data=True, all_tensors_to_one_file=True,
                            location=data_file.name, size_threshold=0)
        else:
            onnx.save_model(graph, str(path))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return path


def default_cache_dir() -> Path:
    return Path(os.environ.get("CADENCE_CACHE", Path.home() / ".cache" / "cadence")) / "onnx"


class OnnxEncoder(EncoderBackend):
    """onnxruntime session over an exported encoder (fp32 graph; outputs cast to ``dtype``)."""

    name = "onnx"

    def __init__(
        self,
        model: nn.Module,
        device: torch.device | str = "cpu",
        dtype: torch.dtype | None = None,
        onnx_path: str | Path | None = None,
        external_data: bool | None = None,
        threads: int = 0,
    ) -> None:
        super().__init__(model, device, dtype)
        ort = require("onnxruntime")
        path = Path(onnx_path) if onnx_path else default_cache_dir() / weights_digest(model) / "encoder.onnx"
        if not path.is_file():
            export_encoder(model, path, external_data=external_data)
        self.path = path
        options = ort.SessionOptions()
        if threads:
            options.intra_op_num_threads = threads
        providers = ["CPUExecutionProvider"]
        if self.device.type == "cuda" and "CUDAExecutionProvider" in ort.get_available_providers():
            providers.insert(0, "CUDAExecutionProvider")
        self.session = ort.InferenceSession(str(path), options, providers=providers)

    def encode(self, features: torch.Tensor, lengths: torch.Tensor) -> EncoderOutput:
        feeds = {"features": features.detach().float().cpu().numpy(),
                 "lengths": lengths.detach().cpu().numpy().astype(np.int64)}
        enc, enc_lengths = self.session.run(["enc_proj", "enc_lengths"], feeds)
        enc_t = torch.from_numpy(enc).to(device=self.device, dtype=self.dtype)
        return EncoderOutput(enc_t, torch.from_numpy(enc_lengths).to(self.device).long())

    def warmup(self) -> None:
        mels = self.model.config.encoder_config.num_mel_bins
        self.encode(torch.zeros(1, 64, mels), torch.tensor([64]))


__all__ = ["ExportableEncoder", "OnnxEncoder", "export_encoder", "subsampled_lengths"]
