"""FastConformer (the compiled/graphed encoder's math) equals transformers' Parakeet encoder (CPU, tiny config)."""

from __future__ import annotations

import pytest
import torch

transformers = pytest.importorskip("transformers")

from asr.parakeet.encoders.fast_conformer import FastConformer, encoder_frames, rel_shift  # noqa: E402
from asr.parakeet.tiny import tiny_tdt  # noqa: E402


def test_rel_shift_strided_view_equals_pad_reshape() -> None:
    full = torch.randn(2, 3, 7, 13)
    assert torch.equal(rel_shift(full, strided=True), rel_shift(full, strided=False))


@pytest.mark.parametrize("scale_input,bias", [(False, False), (True, True)])
def test_fast_conformer_matches_transformers_on_valid_frames(scale_input: bool, bias: bool) -> None:
    model = tiny_tdt(scale_input=scale_input, attention_bias=bias, convolution_bias=bias)
    fast = FastConformer(model.encoder, model.encoder_projector, dtype=torch.float32)
    frames = 96
    feats = torch.randn(3, frames, 32)
    lengths = torch.tensor([96, 61, 9])
    mask = torch.arange(frames)[None] < lengths[:, None]
    feats = feats * mask[..., None]
    with torch.no_grad():
        want = model.get_audio_features(input_features=feats, attention_mask=mask).pooler_output
        got = fast(feats, lengths)
    assert got.shape == want.shape == (3, encoder_frames(frames), 16)
    enc_len = (((lengths - 1) // 2 + 1 - 1) // 2 + 1 - 1) // 2 + 1
    for i in range(3):
        a, b = got[i, : enc_len[i]], want[i, : enc_len[i]]
        assert torch.allclose(a, b, atol=2e-4, rtol=1e-4), (i, (a - b).abs().max())


def test_positions_cached_per_length() -> None:
    model = tiny_tdt()
    fast = FastConformer(model.encoder, None, dtype=torch.float32)
    x = torch.zeros(1, 10, 64)
    assert fast.positions(x) is fast.positions(x)
    fast.export_mode = True
    assert isinstance(fast.positions(x), list)
