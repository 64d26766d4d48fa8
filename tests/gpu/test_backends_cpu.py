"""The GPU encoder backends plug into the encoder registry (CPU)."""

from __future__ import annotations

import sys

import pytest
import torch

pytest.importorskip("transformers")

from asr.parakeet.encoders import backend_names, create_encoder  # noqa: E402
from asr.parakeet.tiny import tiny_tdt  # noqa: E402


def test_gpu_backends_are_registered() -> None:
    names = backend_names()
    assert {"cuda_graphs", "tensorrt", "eager"} <= set(names)


def test_tensorrt_backend_without_tensorrt_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "tensorrt", None)
    with pytest.raises(ImportError, match=r"cadence\[tensorrt\]"):
        create_encoder("tensorrt", tiny_tdt(), device="cpu")


def test_cuda_graphs_backend_matches_eager_on_cpu() -> None:
    model = tiny_tdt(seed=4)
    eager = create_encoder("eager", model, device="cpu", dtype=torch.float32)
    graphed = create_encoder("cuda_graphs", model, device="cpu", dtype=torch.float32, profiles="2x64,4x128")
    feats = torch.randn(3, 100, 32)
    lengths = torch.tensor([100, 70, 33])
    feats = feats * (torch.arange(100)[None] < lengths[:, None])[..., None]
    want, got = eager(feats, lengths), graphed(feats, lengths)
    assert torch.equal(want.lengths, got.lengths)
    for i, n in enumerate(want.lengths.tolist()):
        assert torch.allclose(got.enc_proj[i, :n], want.enc_proj[i, :n], atol=2e-4, rtol=1e-4)
