"""The fused decoder steps decode exactly like the torch step bodies (CPU via Triton's interpreter; CUDA)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch


@pytest.mark.timeout(600)
def test_fused_steps_match_the_torch_bodies_under_the_triton_interpreter(tmp_path: Path) -> None:
    pytest.importorskip("triton")
    from tests.gpu.fused_parity import BIASES
    from tests.gpu.interpreted import run_side_by_side

    # The two blank biases in two processes side by side, each on its inputs of the full run.
    results = run_side_by_side([["tests.gpu.fused_parity", "cpu", "eager", f"bias={b}"] for b in BIASES], tmp_path)
    problems = [p for r in results for p in r["problems"]]
    tokens = sum(r["tokens"] for r in results)
    print("tokens compared:", tokens)  # ~300 with the CPU shapes of fused_parity
    assert problems == []
    assert tokens > 200  # the cases really decode something


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("mode", ["conditional", "graphs", "eager"])
def test_fused_steps_match_the_torch_bodies_on_cuda(mode: str) -> None:
    pytest.importorskip("triton")
    if mode == "conditional":
        pytest.importorskip("cuda.bindings")
    from tests.gpu.fused_parity import check

    result = check("cuda", mode)
    assert result["problems"] == []
    assert result["tokens"] > 200


def test_unknown_step_is_a_value_error() -> None:
    from asr.parakeet.decoding.graph_decoder import resolve_step
    from asr.parakeet.decoding.label_looping import LabelLoopingDecoder
    from asr.parakeet.tiny import tiny_tdt

    decoder = LabelLoopingDecoder.from_model(tiny_tdt(), device="cpu", dtype=torch.float32)
    with pytest.raises(ValueError, match="auto, torch, fused"):
        resolve_step("fast", decoder)
    assert resolve_step("auto", decoder) == "torch"  # CPU tensors: the torch bodies


def test_auto_steps_fall_back_to_the_torch_bodies_when_the_fused_kernels_fail(monkeypatch) -> None:
    from asr.parakeet.decoding import fused_step, graph_decoder
    from asr.parakeet.decoding.graph_decoder import GraphDecoder
    from asr.parakeet.decoding.label_looping import LabelLoopingDecoder
    from asr.parakeet.tiny import tiny_tdt

    decoder = LabelLoopingDecoder.from_model(tiny_tdt(seed=3), device="cpu", dtype=torch.float32)
    monkeypatch.setattr(graph_decoder, "resolve_step", lambda step, dec: "fused")  # as on a CUDA box

    def broken(self) -> None:
        raise RuntimeError("PTX JIT compilation failed")

    monkeypatch.setattr(fused_step.FusedSteps, "__init__", lambda self, dec, state: None)
    monkeypatch.setattr(fused_step.FusedSteps, "outer", broken, raising=False)
    monkeypatch.setattr(fused_step.FusedSteps, "reset_flags", lambda self: None, raising=False)
    graph = GraphDecoder(decoder, mode="eager", step="auto")
    enc = torch.randn(3, 30, decoder.joint_hidden, generator=torch.Generator().manual_seed(2))
    got, _ = graph.decode(enc, [30, 17, 5])
    want, _ = decoder.decode(enc, [30, 17, 5], state=decoder.alloc(graph.state.batch_size, graph.state.max_frames))
    assert graph.step == "torch" and graph.fused is None
    assert [g.tokens for g in got] == [w.tokens for w in want]

    with pytest.raises(RuntimeError, match="PTX"):  # asked for explicitly: no silent downgrade
        GraphDecoder(decoder, mode="eager", step="fused").ensure(3, 30)
