"""Encoder shape profiles: parsing, per-request selection and batch splitting (CPU only)."""

from __future__ import annotations

import pytest

from asr.parakeet.gpu.profiles import (
    DEFAULT_PROFILES,
    ShapeProfile,
    aligned_frames,
    parse_profiles,
    plan_batches,
    select_profile,
)


def test_parse_default_profiles_cover_streaming_segments_and_long_windows() -> None:
    profiles = parse_profiles(DEFAULT_PROFILES)
    by_name = {p.name: p for p in profiles}
    assert by_name["chunk"].frames >= 20  # 0.2 s chunk = 20 feature frames
    assert by_name["segment"].frames >= 3001  # 30 s clip = 3001 STFT frames
    assert by_name["long"].frames >= 30001  # 5 min window
    assert [p.frames for p in profiles] == sorted(p.frames for p in profiles)
    assert all(p.frames % 32 == 0 for p in profiles)
    assert aligned_frames(3001) == 3008 and aligned_frames(64) == 64


def test_parse_errors() -> None:
    with pytest.raises(ValueError):
        parse_profiles("")
    with pytest.raises(ValueError):
        parse_profiles("a=12")
    with pytest.raises(ValueError):
        parse_profiles("a=0x100")
    with pytest.raises(ValueError):
        parse_profiles("a=1x100,a=2x200")
    assert parse_profiles("4x128")[0] == ShapeProfile("p0", 4, 128)


def test_select_profile_picks_cheapest_that_fits() -> None:
    profiles = parse_profiles("chunk=512x32,stream=128x1024,segment=128x3072,long=4x30720")
    assert select_profile(profiles, 300, 20).name == "chunk"
    assert select_profile(profiles, 3, 500).name == "stream"
    assert select_profile(profiles, 128, 3001).name == "segment"
    assert select_profile(profiles, 2, 20000).name == "long"
    assert select_profile(profiles, 600, 20) is None
    assert select_profile(profiles, 1, 40000) is None


def test_plan_batches_splits_large_batches() -> None:
    profiles = parse_profiles("stream=128x1024,segment=128x3072,small=16x3072")
    pieces = plan_batches(profiles, 300, 3001)
    assert [(p.name, start, count) for p, start, count in pieces] == [
        ("segment", 0, 128),
        ("segment", 128, 128),
        ("segment", 256, 44),
    ]
    pieces = plan_batches(profiles, 140, 3001)
    assert [(p.name, count) for p, _, count in pieces] == [("segment", 128), ("small", 12)]
    assert sum(count for _, _, count in plan_batches(profiles, 1000, 10)) == 1000
    with pytest.raises(ValueError, match="window"):
        plan_batches(profiles, 1, 5000)


def test_profile_samples_give_exactly_its_frames() -> None:
    p = ShapeProfile("segment", 128, 3072)
    assert p.samples // 160 + 1 == 3072
