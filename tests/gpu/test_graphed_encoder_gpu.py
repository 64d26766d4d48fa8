"""The cuda_graphs encoder backend (graph replay per profile) matches the eager backend (needs CUDA)."""

from __future__ import annotations

import pytest
import torch

from asr.parakeet.encoders import create_encoder
from asr.parakeet.tiny import tiny_tdt

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA"),
    pytest.mark.timeout(180),
]


def test_graph_replays_match_eager_across_profiles_and_splits() -> None:
    model = tiny_tdt(seed=4)
    eager = create_encoder("eager", model, device="cuda", dtype=torch.float32)
    graphed = create_encoder(
        "cuda_graphs", model, device="cuda", dtype=torch.float32, profiles="2x64,4x128", compile=False
    )
    gen = torch.Generator().manual_seed(0)
    for batch, frames in ((1, 50), (3, 100), (7, 120)):  # the last one is split over two replays
        lengths = torch.randint(10, frames + 1, (batch,), generator=gen)
        lengths[0] = frames
        feats = (
            torch.randn(batch, frames, 32, generator=gen)
            * (torch.arange(frames)[None] < lengths[:, None])[..., None]
        )
        want, got = eager(feats, lengths), graphed(feats, lengths)
        assert torch.equal(want.lengths.cpu(), got.lengths.cpu())
        for i, n in enumerate(want.lengths.tolist()):
            assert torch.allclose(got.enc_proj[i, :n], want.enc_proj[i, :n], atol=1e-3, rtol=1e-3)


def test_windows_longer_than_every_profile_run_eagerly_instead_of_failing(caplog) -> None:
    model = tiny_tdt(seed=5)
    eager = create_encoder("eager", model, device="cuda", dtype=torch.float32)
    graphed = create_encoder(  # not compiled: the fallback is what is tested, and compiling took minutes
        "cuda_graphs", model, device="cuda", dtype=torch.float32, profiles="2x64,2x128", compile=False
    )
    feats = torch.randn(2, 300, 32, generator=torch.Generator().manual_seed(1))  # past the 128-frame profile
    lengths = torch.tensor([300, 211])
    with caplog.at_level("WARNING"):
        got = graphed(feats, lengths)
    want = eager(feats, lengths)
    assert "exceed every profile" in caplog.text
    assert torch.equal(want.lengths.cpu(), got.lengths.cpu())
    for i, n in enumerate(want.lengths.tolist()):
        assert torch.allclose(got.enc_proj[i, :n], want.enc_proj[i, :n], atol=1e-3, rtol=1e-3)
