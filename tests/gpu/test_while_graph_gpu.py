"""The three loop modes give the same results as the eager loop on a decoder-shaped toy (needs CUDA)."""

from __future__ import annotations

import pytest
import torch

from asr.parakeet.decoding.graph_modes import GraphMode
from asr.parakeet.decoding.selftest import ToyLoop, compare, random_lengths
from asr.parakeet.decoding.while_graph import ConditionalLoop, EagerLoop, HostCheckedLoop

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA"),
    pytest.mark.timeout(120),
]


def _build(mode: GraphMode, toy: ToyLoop):
    if mode is GraphMode.CONDITIONAL:
        pytest.importorskip("cuda.bindings")
        return ConditionalLoop(toy.spec(), torch.device("cuda"))
    if mode is GraphMode.HOST_CHECKS:
        return HostCheckedLoop(toy.spec(), torch.device("cuda"))
    return EagerLoop(toy.spec())


@pytest.mark.parametrize("mode", [GraphMode.CONDITIONAL, GraphMode.HOST_CHECKS])
@pytest.mark.parametrize("batch", [1, 16])
def test_loop_modes_match_eager(mode: GraphMode, batch: int) -> None:
    max_time = 50
    toy = ToyLoop(batch, max_time, seed=batch)
    reference = ToyLoop(batch, max_time, seed=batch)
    toy.prepare(random_lengths(batch, max_time, 0))  # warm-up iterations may touch the state
    runner = _build(mode, toy)
    eager = EagerLoop(reference.spec())
    # Unrelated allocations after capture must not alias the graph's temporaries.
    junk = [torch.full((batch, 4096), 7.0, device="cuda") for _ in range(8)]
    for seed in range(3):
        lengths = random_lengths(batch, max_time, seed)
        toy.prepare(lengths)
        runner.run()
        reference.prepare(lengths)
        eager.run()
        torch.cuda.synchronize()
        assert compare(toy.result(), reference.result()) == [], f"seed {seed}"
    assert all(bool((j == 7.0).all()) for j in junk)


@pytest.mark.parametrize("mode", [GraphMode.CONDITIONAL, GraphMode.HOST_CHECKS])
def test_loop_zero_iterations(mode: GraphMode) -> None:
    toy = ToyLoop(4, 10)
    toy.prepare(torch.full((4,), 5))
    runner = _build(mode, toy)
    toy.prepare(torch.zeros(4, dtype=torch.long))
    runner.run()
    torch.cuda.synchronize()
    assert int(toy.steps.sum()) == 0 and int(toy.t.sum()) == 0
