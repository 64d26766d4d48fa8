"""Delivery ratio and chunk lateness against a real-time player."""

from __future__ import annotations

import pytest

from agent.metrics.delivery import PlayoutTracker


def test_exactly_real_time_stream_is_ratio_one_and_never_late() -> None:
    t = PlayoutTracker()
    lates = [t.chunk(10.0 + 0.02 * k, 0.02) for k in range(100)]
    reply = t.finish()
    assert max(lates) == pytest.approx(0.0, abs=1e-9)
    assert reply is not None and reply.ratio == pytest.approx(1.0)
    assert reply.audio_s == pytest.approx(2.0) and reply.chunks == 100


def test_ratio_is_worst_moment_and_independent_of_chunking() -> None:
    # Sentence 1 (2 s of audio) at t=0, sentence 2 (1.5 s) at t=1.25: ratio 2 / 1.25 = 1.6.
    whole = PlayoutTracker()
    whole.chunk(0.0, 2.0)
    whole.chunk(1.25, 1.5)
    split = PlayoutTracker()
    for _ in range(100):
        split.chunk(0.0, 0.02)
    for _ in range(75):
        split.chunk(1.25, 0.02)
    a, b = whole.finish(), split.finish()
    assert a.ratio == pytest.approx(1.6) and b.ratio == pytest.approx(1.6)


def test_underrun_makes_lateness_and_low_ratio() -> None:
    t = PlayoutTracker()
    assert t.chunk(0.0, 0.5) == 0.0
    assert t.chunk(0.8, 0.5) == pytest.approx(0.3)  # the player ran dry at 0.5
    assert t.chunk(1.2, 0.5) == 0.0  # resumed at 0.8, plays until 1.3
    reply = t.finish()
    assert reply.max_lateness_s == pytest.approx(0.3)
    assert reply.ratio == pytest.approx(0.5 / 0.8)
    assert t.finish() is None  # reset


def test_single_burst_has_no_ratio() -> None:
    t = PlayoutTracker()
    t.chunk(3.0, 1.0)
    t.chunk(3.0, 1.0)
    assert t.finish().ratio is None
