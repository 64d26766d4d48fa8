"""The decoder's CUDA-graph modes give exactly the plain loop's tokens (needs CUDA)."""

from __future__ import annotations

import pytest
import torch

from asr.parakeet.decoding.graph_decoder import GraphDecoder
from asr.parakeet.decoding.label_looping import LabelLoopingDecoder
from asr.parakeet.tiny import tiny_tdt

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA"),
    pytest.mark.timeout(180),
]


def _decoder(blank_bias: float, dtype: torch.dtype = torch.float32) -> LabelLoopingDecoder:
    model = tiny_tdt(seed=5).to("cuda")
    with torch.no_grad():
        model.joint.head.bias[model.config.blank_token_id] += blank_bias
    return LabelLoopingDecoder.from_model(model, device="cuda", dtype=dtype)


@pytest.mark.parametrize("mode", ["conditional", "graphs"])
@pytest.mark.parametrize("blank_bias", [0.0, 0.08])  # 0.0 often hits the 10-symbol cap; 0.08 mixes blanks in
def test_graph_modes_match_plain_loop(mode: str, blank_bias: float) -> None:
    if mode == "conditional":
        pytest.importorskip("cuda.bindings")
    decoder = _decoder(blank_bias)
    graph = GraphDecoder(decoder, mode=mode, step="torch")  # bitwise the plain loop
    gen = torch.Generator(device="cpu").manual_seed(0)
    for batch, frames in ((1, 40), (7, 90), (3, 20)):  # the third fits the grown state: no re-capture
        enc = torch.randn(batch, frames, decoder.joint_hidden, generator=gen).to("cuda")
        lengths = torch.randint(1, frames + 1, (batch,), generator=gen)
        lengths[0] = frames
        got, got_carry = graph.decode(enc, lengths.tolist())
        # Same state shape as the graph's, so the GEMM/LSTM kernels (and their rounding) are the same.
        reference = decoder.alloc(graph.state.batch_size, graph.state.max_frames)
        want, want_carry = decoder.decode(enc, lengths.tolist(), state=reference)
        assert [g.tokens for g in got] == [w.tokens for w in want]
        assert [g.frames for g in got] == [w.frames for w in want]
        assert [g.durations for g in got] == [w.durations for w in want]
        for g, w in zip(got_carry, want_carry, strict=True):
            assert torch.equal(g.last_label, w.last_label) and torch.equal(g.time_jump, w.time_jump)
            assert torch.allclose(g.h, w.h)
    assert graph.mode is not None and graph.mode.value == mode
    assert graph.captures == 2


def test_graph_decoder_streaming_carry_matches_plain_loop() -> None:
    pytest.importorskip("cuda.bindings")
    decoder = _decoder(0.08)
    graph = GraphDecoder(decoder, mode="auto", step="torch")
    gen = torch.Generator(device="cpu").manual_seed(1)
    enc = torch.randn(2, 60, decoder.joint_hidden, generator=gen).to("cuda")
    carry_ref = carry_graph = None
    reference = None
    for chunk in range(3):
        part = enc[:, chunk * 20 : (chunk + 1) * 20]
        got, carry_graph = graph.decode(part, [20, 20], carry=carry_graph)
        reference = reference or decoder.alloc(graph.state.batch_size, graph.state.max_frames)
        want, carry_ref = decoder.decode(part, [20, 20], carry=carry_ref, state=reference)
        assert [g.tokens for g in got] == [w.tokens for w in want]
