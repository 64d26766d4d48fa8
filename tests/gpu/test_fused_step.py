"""The fused decoder steps decode exactly like the torch step bodies (CPU via Triton's interpreter; CUDA)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.timeout(600)
def test_fused_steps_match_the_torch_bodies_under_the_triton_interpreter(tmp_path: Path) -> None:
    pytest.importorskip("triton")
    from tests.gpu.fused_parity import BIASES

    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": str(ROOT)}
    # The interpreter keeps one core busy: the two blank biases (each on its inputs of the full run) side by side.
    runs = []
    for bias in BIASES:
        out, err = tmp_path / f"{bias}.out", tmp_path / f"{bias}.err"
        with out.open("w") as o, err.open("w") as e:
            runs.append((subprocess.Popen([sys.executable, "-m", "tests.gpu.fused_parity", "cpu", "eager",
                                           f"bias={bias}"], cwd=ROOT, env=env, stdout=o, stderr=e), out, err))
    try:
        codes = [proc.wait(timeout=540) for proc, _, _ in runs]
    finally:
        for proc, _, _ in runs:
            proc.kill()
    problems, tokens = [], 0
    for code, (_, out, err) in zip(codes, runs, strict=True):
        assert code == 0, err.read_text()[-3000:]
        result = json.loads(out.read_text().strip().splitlines()[-1])
        problems += result["problems"]
        tokens += result["tokens"]
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
