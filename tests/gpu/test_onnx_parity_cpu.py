"""The ONNX export TensorRT builds from computes the same function on onnxruntime (CPU, tiny config)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

pytest.importorskip("transformers")
pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from asr.parakeet.encoders.fast_conformer import FastConformer  # noqa: E402
from asr.parakeet.encoders.onnx_export import export_encoder_onnx, file_digest  # noqa: E402
from asr.parakeet.tiny import tiny_tdt  # noqa: E402


def test_onnx_export_matches_torch_at_other_shapes(tmp_path: Path) -> None:
    model = tiny_tdt(seed=3)
    fast = FastConformer(model.encoder, model.encoder_projector, dtype=torch.float32)
    path = export_encoder_onnx(fast, tmp_path / "encoder.onnx", n_mels=32, example_batch=2, example_frames=80)
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    for batch, frames in ((1, 40), (3, 128)):  # shapes other than the export example
        feats = torch.randn(batch, frames, 32)
        lengths = torch.full((batch,), frames, dtype=torch.long)
        lengths[-1] = max(9, frames // 3)
        with torch.no_grad():
            want = fast(feats, lengths).numpy()
        (got,) = session.run(None, {"features": feats.numpy(), "lengths": lengths.numpy()})
        assert got.shape == want.shape
        assert np.allclose(got, want, atol=1e-4, rtol=1e-4), np.abs(got - want).max()
    assert len(file_digest(path)) == 64
