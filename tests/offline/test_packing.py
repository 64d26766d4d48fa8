"""Packing windows into fixed-length inputs and splitting the words back."""

from __future__ import annotations

import numpy as np

from asr.offline.packing import pack, packed_audio, split_words
from asr.offline.results import Word


def test_first_fit_decreasing_keeps_the_seed_and_respects_capacity() -> None:
    lengths = [10, 25, 8, 12, 5, 30]
    packs = pack(lengths, capacity=30, max_packs=2, gap=1, first=4)
    placed = [i for p in packs for i, _ in p.members]
    assert 4 in placed and len(set(placed)) == len(placed)
    for p in packs:
        assert p.used <= 30
        ends = [off + lengths[i] for i, off in p.members]
        starts = [off for _, off in p.members]
        assert all(s >= e + 1 for e, s in zip(ends, starts[1:], strict=False))  # a gap between members
    assert sum(lengths[i] for i in placed) >= 55  # the two packs are mostly full


def test_words_go_back_to_their_window() -> None:
    rate = 10
    windows = [np.ones(20, np.float32), np.full(30, 2.0, np.float32)]
    (p,) = pack([20, 30], capacity=100, max_packs=1, gap=5)
    audio = packed_audio(p, windows)
    offsets = dict(p.members)
    assert audio[offsets[1]:offsets[1] + 30].tolist() == [2.0] * 30
    assert audio[offsets[0]:offsets[0] + 20].tolist() == [1.0] * 20
    first = offsets[1] / rate  # the longer window went in first
    words = [Word(first + 0.5, first + 1.0, " b1"), Word(3.1, 3.3, " gap"),
             Word(offsets[0] / rate + 0.2, offsets[0] / rate + 0.6, " a1")]
    split = split_words(p, [20, 30], words, rate)
    assert [w.text for w in split[1]] == [" b1", " gap"] and [w.text for w in split[0]] == [" a1"]
    assert (split[1][0].start, split[1][0].end) == (0.5, 1.0)
    assert abs(split[0][0].start - 0.2) < 1e-9 and split[1][1].end <= 3.0
