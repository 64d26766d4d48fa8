"""The bucket plan of Kokoro's decoder CUDA graphs (the capture itself is CUDA-only: tests/gpu/test_kokoro_cuda.py)."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")

from tts.kokoro import config as kconfig  # noqa: E402
from tts.kokoro.checkpoint import build_random  # noqa: E402
from tts.kokoro.decoder_graphs import DecoderGraphs, bucket_sizes  # noqa: E402
from tts.kokoro.text_graphs import TextGraphs  # noqa: E402


def test_buckets_cover_batches_and_frames_within_the_cell_cap() -> None:
    sizes = bucket_sizes(max_batch=64, frame_step=32, max_frames=512, max_cells=64 * 192)
    assert {b for b, _ in sizes} == {1, 2, 4, 8, 16, 32, 64}
    assert max(f for b, f in sizes if b == 64) == 192  # the cap binds the largest batch
    assert max(f for b, f in sizes if b == 16) == 512
    assert all(b * f <= 64 * 192 for b, f in sizes)
    assert bucket_sizes(max_batch=48, frame_step=64, max_frames=128, max_cells=10**6)[-2:] == [(48, 64), (48, 128)]


def test_graphs_refuse_a_cpu_model() -> None:
    model = build_random(kconfig.tiny_config(), seed=0)
    with pytest.raises(ValueError, match="CUDA"):
        DecoderGraphs(model)
    with pytest.raises(ValueError, match="CUDA"):
        TextGraphs(model)
