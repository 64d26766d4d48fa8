"""The bucket plan of Kokoro's decoder CUDA graphs (the capture itself is CUDA-only: tests/gpu/test_kokoro_cuda.py)."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")

from tts.kokoro import config as kconfig  # noqa: E402
from tts.kokoro.checkpoint import build_random  # noqa: E402
from tts.kokoro.decoder_graphs import DecoderGraphs  # noqa: E402
from tts.kokoro.graph_buckets import bucket_sizes, split_rows  # noqa: E402
from tts.kokoro.text_graphs import TextGraphs  # noqa: E402


def test_buckets_cover_batches_and_frames_within_the_cell_cap() -> None:
    sizes = bucket_sizes(max_batch=64, step=32, max_length=512, max_cells=64 * 192)
    assert {b for b, _ in sizes} == {1, 2, 4, 8, 16, 32, 64}
    assert max(f for b, f in sizes if b == 64) == 192  # the cap binds the largest batch
    assert max(f for b, f in sizes if b == 16) == 512
    assert all(b * f <= 64 * 192 for b, f in sizes)
    assert bucket_sizes(max_batch=48, step=64, max_length=128, max_cells=10**6)[-2:] == [(48, 64), (48, 128)]


def test_graphs_refuse_a_cpu_model() -> None:
    model = build_random(kconfig.tiny_config(), seed=0)
    with pytest.raises(ValueError, match="CUDA"):
        DecoderGraphs(model)
    with pytest.raises(ValueError, match="CUDA"):
        TextGraphs(model)


def test_split_rows_fits_each_group_to_a_bucket_longest_first() -> None:
    """Run 64: batches of 40-64 past every bucket ran eagerly and out of memory; now rows are replayed in groups."""
    buckets = bucket_sizes(max_batch=64, step=32, max_length=512, max_cells=64 * 192)
    frames = [100, 300, 190, 500, 600, 40, 180] * 9  # 63 rows: two of every nine longer than every bucket
    groups, eager = split_rows(frames, buckets)
    rows = sorted([r for g in groups for r in g] + eager)
    assert rows == list(range(len(frames)))  # every row once
    assert sorted(eager) == [r for r, n in enumerate(frames) if n > 512]
    for group in groups:
        longest = max(frames[r] for r in group)
        assert any(b >= len(group) and f >= longest for b, f in buckets)
        assert frames[group[0]] == longest  # each group starts at its longest row
    assert [max(frames[r] for r in g) for g in groups] == sorted((max(frames[r] for r in g) for g in groups),
                                                                  reverse=True)
    # as many rows as the bucket for each group's longest row holds: 9 of 500 + 7 of 300 (16 x 512), then the
    # other 2 of 300 and the next 30 (32 x 320), then the last 6 (8 x 32)
    assert [len(g) for g in groups] == [16, 32, 6]
    assert split_rows([10, 20], buckets) == ([[1, 0]], [])
    assert split_rows([], buckets) == ([], [])
    assert split_rows([700], buckets) == ([], [0])
