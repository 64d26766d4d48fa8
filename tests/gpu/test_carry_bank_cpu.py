"""The device carry bank gives the same streaming tokens as prepare(carry=...) (CPU)."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("transformers")

from asr.parakeet.decoding.carry_bank import CarryBank  # noqa: E402
from asr.parakeet.decoding.label_looping import LabelLoopingDecoder  # noqa: E402
from asr.parakeet.tiny import tiny_tdt  # noqa: E402


def test_bank_matches_per_stream_carries() -> None:
    model = tiny_tdt(seed=5)
    with torch.no_grad():
        model.joint.head.bias[model.config.blank_token_id] += 0.05
    decoder = LabelLoopingDecoder.from_model(model, device="cpu", dtype=torch.float32)
    streams, chunk = 5, 6
    enc = torch.randn(streams, 4 * chunk, decoder.joint_hidden, generator=torch.Generator().manual_seed(2))
    bank = CarryBank(decoder, streams)
    state = decoder.alloc(streams, chunk)
    carries = [None] * streams
    for step in range(4):
        rows = torch.tensor([4, 1, 3]) if step % 2 else torch.arange(streams)  # a subset some ticks
        part = enc[rows, step * chunk : (step + 1) * chunk]
        want, new = decoder.decode(part, [chunk] * len(rows), carry=[carries[r] for r in rows.tolist()])
        for r, c in zip(rows.tolist(), new, strict=True):
            carries[r] = c
        decoder.prepare(state, part, [chunk] * len(rows))
        bank.load(state, rows)
        decoder.run(state)
        got = decoder.collect(state, len(rows))
        bank.store(state, rows)
        assert [g.tokens for g in got] == [w.tokens for w in want]
        assert [g.frames for g in got] == [w.frames for w in want]
