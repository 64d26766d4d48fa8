"""Windows through shared memory: the engine process sees exactly the worker's samples, nothing is left."""

from __future__ import annotations

import os

import numpy as np
import pytest

from asr.offline import shm_audio
from asr.offline.shm_audio import SHM_DIR, SegmentWriter, map_windows, remove_segments, segment_prefix

pytestmark = pytest.mark.skipif(not shm_audio.available(), reason="no /dev/shm")


def test_windows_come_back_exactly_and_the_name_is_gone() -> None:
    rng = np.random.default_rng(0)
    base = rng.standard_normal(48000).astype(np.float32)
    clips = [base[100:16100], np.concatenate([base[:10], base[-20:]]), base[::2], np.zeros(0, np.float32)]
    writer = SegmentWriter(segment_prefix(os.getpid(), 99))
    name, lengths = writer.write(clips)
    assert (SHM_DIR / name).stat().st_size == 4 * sum(len(c) for c in clips)
    views = map_windows(name, lengths)
    assert not (SHM_DIR / name).exists()  # unlinked as soon as it is mapped
    assert [len(v) for v in views] == [len(c) for c in clips]
    for view, clip in zip(views, clips, strict=True):
        assert np.array_equal(view, clip)
    views[0][0] = 7.0  # writable (torch warns on read-only arrays); the segment is this request's alone
    assert views[0][0] == 7.0


def test_a_short_segment_is_refused_and_leftovers_are_removed() -> None:
    prefix = segment_prefix(os.getpid(), 98)
    writer = SegmentWriter(prefix)
    name, _ = writer.write([np.ones(10, np.float32)])
    with pytest.raises(ValueError, match="not the 80 announced"):
        map_windows(name, [20])
    writer.write([np.ones(5, np.float32)])
    writer.write([np.ones(5, np.float32)])
    assert remove_segments(prefix) == 2
    assert not list(SHM_DIR.glob(prefix + "*"))
