"""A small decoder-shaped loop nest to check a loop mode against the eager loop on this runtime.

Shaped like label looping: an outer loop that steps a recurrent state for the elements that emitted,
an inner loop that advances time for the elements that saw "blank", and a tail that updates the
outer flag. Used by the GPU tests, the smoke benchmark and (optionally) at engine start-up.
"""

from __future__ import annotations

import torch

from asr.parakeet.decoding.while_graph import LoopSpec


class ToyLoop:
    """Preallocated state plus ``prepare`` / ``outer`` / ``inner`` / ``tail`` steps (pure tensor ops)."""

    def __init__(self, batch: int, max_time: int, hidden: int = 64, device: str = "cuda", seed: int = 0):
        gen = torch.Generator().manual_seed(seed)
        self.weight = (torch.randn(hidden, hidden, generator=gen) / hidden**0.5).to(device)
        self.h0 = torch.randn(batch, hidden, generator=gen).to(device)
        self.lengths = torch.zeros(batch, dtype=torch.long, device=device)
        self.h = torch.zeros_like(self.h0)
        self.t = torch.zeros(batch, dtype=torch.long, device=device)
        self.emitted = torch.zeros(batch, dtype=torch.long, device=device)
        self.steps = torch.zeros(batch, dtype=torch.long, device=device)
        self.active = torch.zeros(batch, dtype=torch.bool, device=device)
        self.blank = torch.zeros(batch, dtype=torch.bool, device=device)
        self.outer_active = torch.zeros((), dtype=torch.bool, device=device)
        self.inner_active = torch.zeros((), dtype=torch.bool, device=device)
        self.max_time = max_time

    def prepare(self, lengths: torch.Tensor) -> None:
        self.lengths.copy_(lengths)
        self.h.copy_(self.h0)
        self.t.zero_()
        self.emitted.zero_()
        self.steps.zero_()
        torch.lt(self.t, self.lengths, out=self.active)
        torch.any(self.active, out=self.outer_active)

    def outer(self) -> None:
        stepped = torch.tanh(self.h @ self.weight)
        self.h.copy_(torch.where(self.active[:, None], stepped, self.h))
        self.steps.add_(self.active)
        torch.logical_and(self.h[:, 0] < 0.3, self.active, out=self.blank)
        emit = self.active & ~self.blank
        self.emitted.add_(emit)
        self.t.add_(emit)  # a non-blank advances one frame here (keeps the toy finite)
        torch.logical_and(self.blank, self.t < self.lengths, out=self.blank)
        torch.any(self.blank, out=self.inner_active)

    def inner(self) -> None:
        self.t.add_(self.blank)
        nudged = torch.tanh(self.h @ self.weight + 0.1)
        self.h.copy_(torch.where(self.blank[:, None], nudged, self.h))
        torch.logical_and(self.h[:, 1] < 0.3, self.blank, out=self.blank)
        torch.logical_and(self.blank, self.t < self.lengths, out=self.blank)
        torch.any(self.blank, out=self.inner_active)

    def tail(self) -> None:
        torch.lt(self.t, self.lengths, out=self.active)
        torch.any(self.active, out=self.outer_active)

    def spec(self) -> LoopSpec:
        return LoopSpec(
            flag=self.outer_active,
            body=self.outer,
            inner=LoopSpec(flag=self.inner_active, body=self.inner),
            tail=self.tail,
        )

    def result(self) -> dict[str, torch.Tensor]:
        return {
            "t": self.t.clone(),
            "emitted": self.emitted.clone(),
            "steps": self.steps.clone(),
            "h": self.h.clone(),
        }


def random_lengths(batch: int, max_time: int, seed: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    lengths = torch.randint(0, max_time + 1, (batch,), generator=gen)
    lengths[0] = max_time
    return lengths


def compare(got: dict[str, torch.Tensor], want: dict[str, torch.Tensor]) -> list[str]:
    """Names of the results that differ (integers exactly, the float state to 1e-5)."""
    bad = [k for k in ("t", "emitted", "steps") if not torch.equal(got[k], want[k])]
    if not torch.allclose(got["h"], want["h"], atol=1e-5, rtol=1e-5):
        bad.append("h")
    return bad
