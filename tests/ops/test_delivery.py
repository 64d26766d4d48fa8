"""Delivery ratio (audio per wall second) and chunk lateness against a real-time player."""

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


def test_ratio_is_independent_of_chunking() -> None:
    # Piece 1 (2 s of audio) at t=0, piece 2 (1.5 s) at t=1.25: 2 s delivered per 1.25 s = 1.6x.
    whole = PlayoutTracker()
    whole.chunk(0.0, 2.0)
    whole.chunk(1.25, 1.5)
    split = PlayoutTracker()
    for k in range(100):  # the same pieces as 20 ms chunks, drained a few microseconds apart
        split.chunk(0.0 + k * 1e-5, 0.02)
    for k in range(75):
        split.chunk(1.25 + k * 1e-5, 0.02)
    a, b = whole.finish(), split.finish()
    assert a.ratio == pytest.approx(1.6) and b.ratio == pytest.approx(1.6, rel=1e-3)


def test_fast_pieces_give_headroom_and_an_underrun_is_late() -> None:
    t = PlayoutTracker()
    assert t.chunk(0.0, 0.5) == 0.0
    assert t.chunk(0.8, 0.5) == pytest.approx(0.3)  # the player ran dry at 0.5
    assert t.chunk(1.2, 0.5) == 0.0  # resumed at 0.8, plays until 1.3
    reply = t.finish()
    assert reply.max_lateness_s == pytest.approx(0.3)
    assert reply.ratio == pytest.approx(1.0 / 1.2)  # slower than real time: a stream that starves
    assert t.finish() is None  # reset
    t.chunk(0.0, 3.0)
    t.chunk(0.5, 3.0)
    assert t.finish().ratio == pytest.approx(6.0)


def test_single_burst_has_no_ratio() -> None:
    t = PlayoutTracker()
    t.chunk(3.0, 1.0)
    t.chunk(3.0, 1.0)
    assert t.finish().ratio is None
