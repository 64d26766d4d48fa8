"""Speculative transcription cut points: early on real quiet, never when speech follows."""

from __future__ import annotations

import numpy as np

from asr.eager_segment import EagerSegment
from testkit.corpus import pick
from transports.audio_io import load_audio, to_pcm16

RATE = 16000
CHUNK = 320  # 20 ms


def feed(tracker: EagerSegment, audio: np.ndarray, length: int = 0) -> list[int]:
    """Feed 20 ms chunks of a buffer that already holds ``length`` bytes."""
    pcm = to_pcm16(audio)
    cuts = []
    for i in range(0, len(pcm), 2 * CHUNK):
        piece = pcm[i : i + 2 * CHUNK]
        length += len(piece)
        cut = tracker.observe(piece, RATE, length)
        if cut is not None:
            cuts.append(cut)
    return cuts


def test_cut_comes_soon_after_real_speech_ends_and_covers_it():
    speech = load_audio(pick(["agent-pass"])[0].path, RATE)
    last_voiced = int(np.nonzero(np.abs(speech) > 0.02)[0][-1])
    speech = speech[: last_voiced + 1]
    tracker = EagerSegment(quiet_ms=120)
    cuts = feed(tracker, np.concatenate([speech, np.zeros(RATE // 2, np.float32)]))
    assert cuts, "no speculative cut after the end of speech"
    final = cuts[-1] // 2
    assert final >= last_voiced  # the cut covers every voiced sample
    assert (final - last_voiced) / RATE <= 0.2  # and comes well before a 0.2 s VAD stop + smoothing
    assert tracker.usable() == cuts[-1]


def test_speech_after_the_cut_makes_it_unusable_until_the_next_quiet():
    speech = load_audio(pick(["agent-pass"])[0].path, RATE)
    gap = np.zeros(int(0.3 * RATE), np.float32)
    tracker = EagerSegment(quiet_ms=120)
    first_part = np.concatenate([speech, gap])
    feed(tracker, first_part)
    first = tracker.usable()
    assert first is not None
    feed(tracker, speech[: RATE // 2], 2 * len(first_part))  # the caller goes on talking
    assert tracker.usable() is None
    feed(tracker, gap, 2 * (len(first_part) + RATE // 2))
    assert tracker.usable() is not None and tracker.usable() > first


def test_steady_noise_never_counts_as_quiet():
    noise = np.random.default_rng(0).normal(0, 0.05, RATE).astype(np.float32)  # about -26 dBFS
    tracker = EagerSegment(quiet_ms=120)
    assert feed(tracker, noise) == []
    assert tracker.usable() is None


def test_a_cut_that_could_not_start_is_never_used():
    speech = load_audio(pick(["agent-pass"])[0].path, RATE)
    tracker = EagerSegment(quiet_ms=120)
    cuts = feed(tracker, np.concatenate([speech, np.zeros(RATE // 4, np.float32)]))
    assert cuts and tracker.usable() == cuts[-1]
    tracker.not_started()  # a pass over an earlier, shorter buffer was still running
    assert tracker.usable() is None
