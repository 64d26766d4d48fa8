"""Fused decoder steps vs the torch step bodies: the same tokens, frames, durations and carries.

Shared by the CPU test (Triton's interpreter, in a subprocess with ``TRITON_INTERPRET=1``) and the
CUDA test. ``python -m tests.gpu.fused_parity [device] [mode] [bias=B]`` prints one JSON line of mismatches
(``bias=B``: only that blank bias's cases, on the same inputs as in the full run; the CPU test runs the two
biases in two processes side by side).
"""

from __future__ import annotations

import json
import sys

import torch

from asr.parakeet.decoding.graph_decoder import GraphDecoder
from asr.parakeet.decoding.label_looping import LabelLoopingDecoder
from asr.parakeet.tiny import tiny_tdt


def _decoder(blank_bias: float, device: str, seed: int = 5) -> LabelLoopingDecoder:
    model = tiny_tdt(seed=seed).to(device)
    with torch.no_grad():
        model.joint.head.bias[model.config.blank_token_id] += blank_bias
        # Two predictor layers, so the [h_below | h_own] GEMM input of later layers is exercised.
        if model.decoder.lstm.num_layers < 2:
            raise AssertionError("the tiny model should have a 2-layer predictor")
    return LabelLoopingDecoder.from_model(model, device=device, dtype=torch.float32)


def _compare(got, want, got_carry, want_carry, label: str) -> list[str]:
    problems = []
    for name in ("tokens", "frames", "durations"):
        if [getattr(g, name) for g in got] != [getattr(w, name) for w in want]:
            problems.append(f"{label}: {name} differ")
    for i, (g, w) in enumerate(zip(got_carry, want_carry, strict=True)):
        if not (torch.equal(g.last_label, w.last_label) and torch.equal(g.time_jump, w.time_jump)):
            problems.append(f"{label}: carry {i} label/jump differ")
        if not (torch.allclose(g.h, w.h, atol=1e-5) and torch.allclose(g.c, w.c, atol=1e-5)
                and torch.allclose(g.pred_out, w.pred_out, atol=1e-5)):
            problems.append(f"{label}: carry {i} state differs")
    return problems


# (batch, frames) per case and the streaming chunk length. Triton's interpreter pays per kernel launch
# and per row, so the CPU runs smaller shapes with the same features: one full row, an empty row, a
# nonzero start frame, and three streamed chunks with carries.
CUDA_CASES, CUDA_CHUNK = ((1, 40), (7, 90), (3, 20)), 20
CPU_CASES, CPU_CHUNK = ((1, 16), (5, 20), (3, 10)), 8
BIASES = (0.0, 0.08)  # 0.0 often hits the 10-symbol cap; 0.08 mixes blanks in


def check(device: str = "cpu", mode: str = "eager", biases: tuple[float, ...] = BIASES) -> dict[str, object]:
    """Run every case of ``biases``; returns mismatches (empty when all agree) and how many tokens were
    compared. Each bias's inputs are those of the full run whichever biases are picked."""
    cases, chunk_len = (CPU_CASES, CPU_CHUNK) if device == "cpu" else (CUDA_CASES, CUDA_CHUNK)
    problems: list[str] = []
    tokens = 0
    gen = torch.Generator(device="cpu").manual_seed(0)
    for blank_bias in BIASES:
        decoder = _decoder(blank_bias, device)
        picked = blank_bias in biases
        graph = GraphDecoder(decoder, mode=mode, step="fused") if picked else None
        for batch, frames in cases:
            enc = torch.randn(batch, frames, decoder.joint_hidden, generator=gen).to(device)
            lengths = torch.randint(1, frames + 1, (batch,), generator=gen)
            lengths[0] = frames
            if batch > 2:
                lengths[-1] = 0  # an empty row
            starts = [0] * batch
            if batch > 3:
                starts[1] = min(5, int(lengths[1]))
            if graph is None:
                continue  # the inputs are drawn all the same: the next bias's are those of the full run
            got, got_carry = graph.decode(enc, lengths.tolist(), start_frames=starts)
            reference = decoder.alloc(graph.state.batch_size, graph.state.max_frames)
            want, want_carry = decoder.decode(enc, lengths.tolist(), start_frames=starts, state=reference)
            tokens += sum(len(w.tokens) for w in want)
            problems += _compare(got, want, got_carry, want_carry, f"bias {blank_bias} {batch}x{frames}")
        # streaming: three chunks with carries
        enc = torch.randn(2, 3 * chunk_len, decoder.joint_hidden, generator=gen).to(device)
        if graph is None:
            continue
        carry_g = carry_w = None
        reference = None
        for chunk in range(3):
            part = enc[:, chunk * chunk_len : (chunk + 1) * chunk_len]
            got, carry_g = graph.decode(part, [chunk_len, chunk_len], carry=carry_g)
            reference = reference or decoder.alloc(graph.state.batch_size, graph.state.max_frames)
            want, carry_w = decoder.decode(part, [chunk_len, chunk_len], carry=carry_w, state=reference)
            tokens += sum(len(w.tokens) for w in want)
            problems += _compare(got, want, carry_g, carry_w, f"bias {blank_bias} chunk {chunk}")
        if graph.step != "fused":
            problems.append(f"step is {graph.step}, not fused")
    return {"problems": problems, "tokens": tokens}


if __name__ == "__main__":
    device = sys.argv[1] if len(sys.argv) > 1 else "cpu"
    mode = sys.argv[2] if len(sys.argv) > 2 else "eager"
    picked = tuple(float(a.partition("=")[2]) for a in sys.argv[3:] if a.startswith("bias=")) or BIASES
    print(json.dumps(check(device, mode, picked)))
