"""Encoder shape profiles: parsing, per-request selection and batch splitting (CPU only)."""

from __future__ import annotations

import pytest

from asr.parakeet.encoders.shape_profiles import (
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


def test_streaming_profiles_fit_the_windows_in_small_batch_steps() -> None:
    import numpy as np

    from asr.parakeet.encoders.shape_profiles import streaming_profiles
    from asr.parakeet.streaming import StreamConfig, StreamSession

    config = StreamConfig(left_context_s=2.0, chunk_ms=160)
    text = streaming_profiles(config.window_samples, 256)
    profiles = parse_profiles(text)
    assert text.startswith("s8=8x256,s16=16x256,") and text.endswith(",s256=256x256,lag=64x512")
    session = StreamSession(config)
    session.push(np.zeros(16000 * 5, np.float32))  # 5 s of audio; decoded up to 4.8 s, one chunk due
    session.decoded_frames = session.ready_end_frame() - config.chunk_frames
    window = session.next_request()
    assert window is not None and len(window.audio) == config.window_samples
    smallest = min(profiles, key=lambda p: p.frames)
    assert len(window.audio) // 160 + 1 <= smallest.frames < len(window.audio) // 160 + 1 + 64
    batches = sorted(p.batch for p in profiles if p.name != "lag")
    assert all(b / a <= 2.0 for a, b in zip(batches, batches[1:], strict=False))
    assert all(b / a <= 1.5 for a, b in zip(batches, batches[1:], strict=False) if a >= 16)
    assert [p.batch for p in parse_profiles(streaming_profiles(config.window_samples, 100))][-2] == 100
    with pytest.raises(ValueError):
        streaming_profiles(0, 8)


def test_serve_derives_stream_profiles_and_batch_for_cuda_graphs_on_cuda() -> None:
    from types import SimpleNamespace

    pytest.importorskip("pipecat")  # the STT service module (not installed on the GPU machine)

    from asr.parakeet.shared_engine import stream_max_batch, stream_profiles
    from asr.parakeet.streaming import StreamConfig

    stream = StreamConfig(left_context_s=10.0)
    gpu = SimpleNamespace(device="cuda", encoder_backend="cuda_graphs", profiles="", stream_max_batch=0)
    assert stream_max_batch(gpu) == 256
    derived = parse_profiles(stream_profiles(gpu, stream, 256))
    # full windows at the partial cadence (10 s + 640 ms + a chunk of slack) and half windows
    assert max(p.frames for p in derived if p.name != "lag") == aligned_frames(stream.max_window_samples // 160 + 1)
    assert aligned_frames(stream.max_window_samples // 160 + 1) == 1088
    assert min(p.frames for p in derived) == 576
    assert max(p.batch for p in derived) == 256
    assert stream_profiles(SimpleNamespace(**{**vars(gpu), "profiles": "a=4x512"}), stream, 256) == "a=4x512"
    # gpu.toml's four graphs named by window: the same shapes as the derived ones, and they follow the cadence
    named = SimpleNamespace(**{**vars(gpu), "profiles": "h16=16xhalf,s64=64xfull"})
    assert stream_profiles(named, stream, 256) == "h16=16x576,s64=64x1088"
    slower = StreamConfig(left_context_s=10.0, partial_interval_ms=1920)
    assert stream_profiles(named, slower, 256) == "h16=16x640,s64=64x1216"
    assert max(p.frames for p in parse_profiles(stream_profiles(gpu, slower, 256)) if p.name != "lag") == 1216
    cpu = SimpleNamespace(device="cpu", encoder_backend="eager", profiles="", stream_max_batch=0)
    assert stream_profiles(cpu, stream, 32) == "" and stream_max_batch(cpu) == 32
    assert stream_max_batch(SimpleNamespace(device="cpu", stream_max_batch=64)) == 64
    with pytest.raises(ValueError, match="stream_max_batch"):
        stream_max_batch(SimpleNamespace(device="cpu", stream_max_batch=-1))


def test_gpu_toml_captures_full_and_half_windows_at_its_cadence() -> None:
    """examples/gpu.toml names its four graphs by window: 576 / 1,088 frames at its 640 ms cadence (the shapes
    every GPU run so far captured), and they grow with a slower cadence instead of leaving its windows eager."""
    from pathlib import Path

    from agent.config import load_config
    from asr.parakeet.shared_engine import stream_config, stream_profiles

    config = load_config(str(Path(__file__).resolve().parents[2] / "examples/gpu.toml"))
    assert stream_profiles(config.asr, stream_config(config.asr), 64) == "h16=16x576,h64=64x576,s16=16x1088,s64=64x1088"
    config.asr.partial_interval_ms = 1920
    stream = stream_config(config.asr)
    longest = max(p.frames for p in parse_profiles(stream_profiles(config.asr, stream, 64)))
    assert longest * 160 >= stream.max_window_samples
