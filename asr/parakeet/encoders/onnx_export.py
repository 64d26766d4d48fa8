"""Export the FastConformer encoder (features -> joint-projected frames) to ONNX with dynamic batch and frames.

The export is what TensorRT builds its multi-profile engine from, and what onnxruntime checks for
parity on the CPU. Positions are computed in-graph and the rel_shift uses pad/reshape (no strided
views), so one graph serves every length. Models over 2 GB are written with external data.
"""

from __future__ import annotations

import hashlib
import shutil
import tempfile
from pathlib import Path

import torch
from torch import nn

from asr.parakeet.encoders.fast_conformer import FastConformer

INPUT_FEATURES = "features"
INPUT_LENGTHS = "lengths"
OUTPUT_ENCODED = "encoded"


class ExportableEncoder(nn.Module):
    """``(features (B, T, n_mels) float32, lengths (B,) int64) -> encoded (B, T/8, D) float32``."""

    def __init__(self, fast: FastConformer) -> None:
        super().__init__()
        self.fast = fast
        self.fast.export_mode = True

    def forward(self, features: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        return self.fast(features, lengths).float()


def export_encoder_onnx(
    fast: FastConformer,
    path: str | Path,
    n_mels: int = 128,
    example_batch: int = 2,
    example_frames: int = 200,
    opset: int = 17,
) -> Path:
    """Write the ONNX graph to ``path`` (float32 weights unless the encoder was built in another dtype)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    module = ExportableEncoder(fast).eval()
    device = next((p.device for p in fast.parameters()), torch.device("cpu"))
    features = torch.randn(example_batch, example_frames, n_mels, device=device)
    lengths = torch.full((example_batch,), example_frames, dtype=torch.long, device=device)
    lengths[-1] = example_frames // 2
    tmp = Path(tempfile.mkdtemp(prefix="cadence-onnx-"))
    with torch.no_grad():
        torch.onnx.export(
            module,
            (features, lengths),
            str(tmp / path.name),
            input_names=[INPUT_FEATURES, INPUT_LENGTHS],
            output_names=[OUTPUT_ENCODED],
            dynamic_axes={
                INPUT_FEATURES: {0: "batch", 1: "frames"},
                INPUT_LENGTHS: {0: "batch"},
                OUTPUT_ENCODED: {0: "batch", 1: "encoder_frames"},
            },
            opset_version=opset,
            dynamo=False,
        )
    fast.export_mode = False
    _move_export(tmp, path)
    return path


def _move_export(tmp: Path, path: Path) -> None:
    """Move the export into place; tensors exported as many external files become one ``<name>.data``."""
    files = list(tmp.iterdir())
    try:
        if len(files) == 1:
            shutil.move(str(files[0]), path)
            return
        import onnx

        model = onnx.load(str(tmp / path.name))  # loads the external tensors too
        onnx.save_model(
            model,
            str(path),
            save_as_external_data=True,
            all_tensors_to_one_file=True,
            location=path.name + ".data",
        )
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def file_digest(path: str | Path, chunk: int = 1 << 20) -> str:
    """sha256 of an ONNX file and its ``<name>.data`` external tensors (the model hash of the engine cache)."""
    path = Path(path)
    digest = hashlib.sha256()
    data = path.with_name(path.name + ".data")
    files = [path] + ([data] if data.exists() else [])
    for file in files:
        digest.update(file.name.encode())
        with open(file, "rb") as handle:
            while block := handle.read(chunk):
                digest.update(block)
    return digest.hexdigest()
