"""Shape profiles: the (batch, feature frames) buckets a static-shape backend compiles for."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

FRAME_ALIGN = 16  # feature frames; keeps encoder frames (x8) a multiple of 2


@dataclass(frozen=True, order=True)
class ShapeProfile:
    batch: int
    frames: int

    def fits(self, batch: int, frames: int) -> bool:
        return batch <= self.batch and frames <= self.frames


def parse_profiles(text: str) -> list[ShapeProfile]:
    """``"8x256,4x3008"`` -> profiles sorted by (frames, batch)."""
    out = []
    for item in filter(None, (p.strip() for p in text.split(","))):
        batch, sep, frames = item.partition("x")
        if not sep:
            raise ValueError(f"profile {item!r}: expected BATCHxFRAMES")
        out.append(ShapeProfile(int(batch), int(frames)))
    return sorted(out, key=lambda p: (p.frames, p.batch))


def choose_profiles(frame_counts: Sequence[int], max_batch: int, count: int = 3) -> list[ShapeProfile]:
    """Buckets at quantiles of an expected length distribution (feature frames), all at ``max_batch``."""
    if not frame_counts:
        raise ValueError("need at least one expected length")
    ordered = sorted(frame_counts)
    edges = {ordered[min(len(ordered) - 1, math.ceil(q * len(ordered)) - 1)] for q in
             [(i + 1) / count for i in range(count)]}
    return sorted({ShapeProfile(max_batch, -(-e // FRAME_ALIGN) * FRAME_ALIGN) for e in edges},
                  key=lambda p: (p.frames, p.batch))


def pick_profile(profiles: Sequence[ShapeProfile], batch: int, frames: int) -> ShapeProfile | None:
    """The cheapest profile that holds ``batch`` x ``frames`` (padding only up to it), or None."""
    fitting = [p for p in profiles if p.fits(batch, frames)]
    return min(fitting, key=lambda p: (p.batch * p.frames, p.frames)) if fitting else None
