"""The stream batcher's reusable staging buffer: same batch as pad_batch, no per-tick allocation."""

from __future__ import annotations

import numpy as np
import torch

from asr.parakeet.engine import pad_batch
from asr.parakeet.staging import AudioStaging, unflatten_padded


def test_stage_equals_pad_batch_and_zeroes_stale_tails() -> None:
    staging = AudioStaging("cpu")
    rng = np.random.default_rng(0)
    first = [rng.standard_normal(n).astype(np.float32) for n in (900, 300, 700)]
    staging.stage(first)  # leaves non-zero audio in the buffer
    second = [rng.standard_normal(n).astype(np.float32) for n in (200, 800)]
    got, lengths = staging.stage(second)
    want, want_lengths = pad_batch(second)
    assert torch.equal(got, want) and torch.equal(lengths, want_lengths)


def test_growing_windows_reallocate_rarely() -> None:
    staging = AudioStaging("cpu")
    for width in range(100, 20_000, 100):  # an utterance's window grows every tick
        got, _ = staging.stage([np.ones(width, np.float32)] * 4)
        assert got.shape == (4, width)
    assert staging.allocations <= 10


def test_empty_batches() -> None:
    staging = AudioStaging("cpu")
    audio, lengths = staging.stage([])
    assert audio.shape == (0, 0) and lengths.numel() == 0
    audio, lengths = staging.stage([np.zeros(0, np.float32)])
    assert audio.shape == (1, 0) and lengths.tolist() == [0]


def test_the_device_path_gather_pads_like_pad_batch() -> None:
    rng = np.random.default_rng(1)
    clips = [rng.standard_normal(n).astype(np.float32) for n in (500, 1, 0, 320, 499)]
    flat = torch.cat([torch.from_numpy(c) for c in clips])
    assert torch.equal(unflatten_padded(flat, [len(c) for c in clips]), pad_batch(clips)[0])
    assert unflatten_padded(torch.zeros(0), [0, 0]).shape == (2, 0)


def test_host_fill_concatenates_arrays_tensors_and_views() -> None:
    staging = AudioStaging("cpu")
    rng = np.random.default_rng(2)
    base = rng.standard_normal(1000).astype(np.float32)
    clips = [base[100:400], torch.from_numpy(base[:50].copy()), base[::2][:100], np.zeros(0, np.float32)]
    from asr.parakeet.staging import _as_numpy

    host = staging.fill_host([_as_numpy(c) for c in clips])
    assert np.array_equal(host.numpy(), np.concatenate([base[100:400], base[:50], base[::2][:100]]))
    got, lengths = staging.stage(clips)  # the CPU batch path takes tensors too
    assert lengths.tolist() == [300, 50, 100, 0]
    assert torch.equal(got[1, :50], torch.from_numpy(base[:50])) and not got[1, 50:].any()
