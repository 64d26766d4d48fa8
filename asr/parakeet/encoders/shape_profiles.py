"""Encoder shape profiles: (max batch, max feature frames) buckets, parsed from config and picked per request.

One type for every static-shape backend: a profile is one ``torch.compile`` graph (``compiled``),
one captured CUDA graph (``cuda_graphs``) or one TensorRT optimization profile (``tensorrt``). The
default set covers streaming chunks, 30 s offline segments and long offline windows. Frame counts
are kept multiples of 64 so that encoder frames (x8 subsampling) stay multiples of 8, which keeps
the attention bias rows 16-byte aligned for the fused attention kernels (no padded copy).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

HOP = 160  # samples per feature frame at 16 kHz
FRAME_ALIGN = 64

# name=batch x frames: 0.3 s chunks, 2.5 s windows (2 s left context + a 0.16 s chunk: the benches' streaming
# shape; the agent's default 10 s left context gets streaming_profiles instead),
# 30 s segments (3001 frames), 5 min offline windows (30001 frames).
DEFAULT_PROFILES = "chunk=512x32,stream=128x256,segment=128x3008,long=8x30016"


# Batch steps of the streaming profile set: at most 1.5x apart above 16, so a tick never pays for
# much more than it holds (with steps 16/64/128 a tick of 65 windows paid for 128 and made the next
# tick bigger still: bench/results/NOTES.md, runs 12-13).
STREAM_BATCH_STEPS = (8, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512)


def streaming_profiles(window_samples: int, max_batch: int, lag_batch: int = 64) -> str:
    """The profile set for a stream batcher whose windows hold up to ``window_samples``.

    One profile per batch step up to ``max_batch`` at the window's (aligned) feature frames, plus
    ``lag``: twice the frames at ``lag_batch``, for sessions that fell a few chunks behind.
    """
    if window_samples < 1 or max_batch < 1:
        raise ValueError("window_samples and max_batch must be positive")
    frames = aligned_frames(window_samples // HOP + 1)
    batches = [b for b in STREAM_BATCH_STEPS if b < max_batch] + [max_batch]
    specs = [f"s{b}={b}x{frames}" for b in batches]
    specs.append(f"lag={min(lag_batch, max_batch)}x{2 * frames}")
    return ",".join(specs)


def offline_profiles(max_batch: int) -> str:
    """The offline server's profiles: windows up to ~3.8, ~6.4, ~10, ~20 and ~30 s (frames multiples of 64) at
    ``max_batch``, and, above a batch of 16, each class again at a small batch for a class's few leftover windows.

    The short classes cut the padding of a leaderboard-like length mix (1-35 s, mean ~7 s) from 1.75x to 1.37x
    the audio; the small batches stop a few windows from replaying a whole batch (the window batcher splits a
    class's pending windows over the batch sizes by their measured replay cost: ``asr.offline.batch_cost``).
    Against 10/20/30 s alone on one H200 loan (bench/results/run43_profiles, before the 3.8/6.4 s small
    variants): 10 s clips at 256 requests 9,554 vs 8,291 audio s/s, the mix 6,442 vs 6,001, one 10 s request
    p50 19 vs 36 ms, 1 h files 10,015 vs 10,698 (engine alone 14,182 vs 14,682).
    """
    b = max_batch
    small = b > 16
    classes = [("w4", 384, 16), ("w6", 640, 16), ("w10", 1024, 16), ("w20", 2048, 16), ("w30", 3008, 8)]
    return ",".join(spec for name, frames, few in classes
                    for spec in ([f"{name}s={few}x{frames}"] if small else []) + [f"{name}={b}x{frames}"])


@dataclass(frozen=True)
class ShapeProfile:
    """Inputs up to ``batch`` x ``frames`` feature frames run in this profile (padded up to it)."""

    name: str
    batch: int
    frames: int

    @property
    def samples(self) -> int:
        """Audio samples whose centred STFT gives exactly ``frames`` frames."""
        return (self.frames - 1) * HOP

    @property
    def cost(self) -> float:
        """Work of one replay, in frame units: linear layers grow with frames, attention with frames^2.

        Per encoder frame the linear layers do ~24M MACs and attention ~3 * T_enc * 1024; with
        T_enc = frames / 8 the two are equal at ~62,500 feature frames.
        """
        return self.batch * self.frames * (1.0 + self.frames / 62_500)

    def fits(self, batch: int, frames: int) -> bool:
        return batch <= self.batch and frames <= self.frames

    def spec(self) -> str:
        return f"{self.name}={self.batch}x{self.frames}"


def aligned_frames(frames: int, align: int = FRAME_ALIGN) -> int:
    """``frames`` rounded up to the profile alignment."""
    return -(-frames // align) * align


def parse_profiles(text: str) -> list[ShapeProfile]:
    """``"chunk=512x32,segment=128x3072"`` -> profiles sorted by frames, then batch."""
    profiles: list[ShapeProfile] = []
    for item in filter(None, (part.strip() for part in text.split(","))):
        name, sep, shape = item.partition("=")
        if not sep:
            name, shape = f"p{len(profiles)}", item
        try:
            batch_text, frames_text = shape.lower().split("x")
            batch, frames = int(batch_text), int(frames_text)
        except ValueError:
            raise ValueError(f"bad encoder profile {item!r}: expected name=BATCHxFRAMES") from None
        if batch < 1 or frames < 1:
            raise ValueError(f"bad encoder profile {item!r}: batch and frames must be positive")
        profiles.append(ShapeProfile(name.strip(), batch, frames))
    if not profiles:
        raise ValueError("no encoder profiles given")
    if len({p.name for p in profiles}) != len(profiles):
        raise ValueError(f"duplicate encoder profile names in {text!r}")
    return sorted(profiles, key=lambda p: (p.frames, p.batch))


def as_profiles(profiles: Sequence[ShapeProfile] | str | None, default: str) -> list[ShapeProfile]:
    """A backend's ``profiles`` argument as profiles: given ones, a ``name=BATCHxFRAMES,...`` text, or ``default``."""
    if profiles is None or isinstance(profiles, str):
        return parse_profiles(profiles or default)
    return list(profiles)


def choose_profiles(frame_counts: Sequence[int], max_batch: int, count: int = 3) -> list[ShapeProfile]:
    """Buckets at quantiles of an expected length distribution (feature frames), all at ``max_batch``."""
    if not frame_counts:
        raise ValueError("need at least one expected length")
    ordered = sorted(frame_counts)
    edges = sorted({aligned_frames(ordered[min(len(ordered) - 1, math.ceil(q * len(ordered)) - 1)])
                    for q in [(i + 1) / count for i in range(count)]})
    return [ShapeProfile(f"q{i}", max_batch, frames) for i, frames in enumerate(edges)]


def select_profile(profiles: Sequence[ShapeProfile], batch: int, frames: int) -> ShapeProfile | None:
    """The cheapest profile that holds the whole request, or None when none does."""
    fitting = [p for p in profiles if p.fits(batch, frames)]
    return min(fitting, key=lambda p: (p.cost, p.frames)) if fitting else None


def plan_batches(
    profiles: list[ShapeProfile], batch: int, frames: int
) -> list[tuple[ShapeProfile, int, int]]:
    """Split a request into ``(profile, start, count)`` pieces; raises if ``frames`` exceeds every profile."""
    whole = select_profile(profiles, batch, frames)
    if whole is not None:
        return [(whole, 0, batch)]
    long_enough = [p for p in profiles if p.frames >= frames]
    if not long_enough:
        longest = max(p.frames for p in profiles)
        raise ValueError(
            f"{frames} feature frames exceed every encoder profile (max {longest}); window the audio"
        )
    # Largest batch among the profiles long enough; the last piece may use a cheaper profile.
    big = max(long_enough, key=lambda p: (p.batch, -p.frames))
    pieces: list[tuple[ShapeProfile, int, int]] = []
    start = 0
    while start < batch:
        count = min(big.batch, batch - start)
        profile = select_profile(profiles, count, frames) or big
        pieces.append((profile, start, count))
        start += count
    return pieces
