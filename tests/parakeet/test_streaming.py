"""Streaming sessions and the multi-session batcher on a tiny checkpoint."""

from __future__ import annotations

import asyncio
import random

import numpy as np
import pytest

from asr.parakeet.batcher import StreamBatcher
from asr.parakeet.engine import ParakeetEngine
from asr.parakeet.streaming import StreamConfig
from asr.parakeet.tiny import synthetic_speech

FRAME = 320  # 20 ms of 16 kHz audio, what a transport delivers


@pytest.fixture(scope="module")
def engine(tiny_dir) -> ParakeetEngine:
    return ParakeetEngine.from_pretrained(tiny_dir)


def _offline(engine: ParakeetEngine, clip: np.ndarray):
    return engine.transcribe_tokens([clip])[0]


async def _stream(batcher: StreamBatcher, clip: np.ndarray, partials: list, jitter: random.Random | None = None,
                  keep_up: bool = False):
    session = batcher.open(on_partial=partials.append)
    for lo in range(0, len(clip), FRAME):
        batcher.feed(session, clip[lo : lo + FRAME])
        await asyncio.sleep(jitter.uniform(0, 0.002) if jitter else 0)
        while keep_up and batcher.pending(session):  # like a real-time caller on a fast engine
            await asyncio.sleep(0.001)
    final = await batcher.finalize(session)
    return session, final


async def test_final_equals_offline_when_left_context_covers_the_utterance(engine):
    batcher = StreamBatcher(engine, StreamConfig(chunk_ms=160, left_context_s=10.0))
    for seed, seconds in [(1, 2.3), (2, 3.1), (3, 0.5)]:
        clip = synthetic_speech(seconds, seed=seed)
        partials: list = []
        session, final = await _stream(batcher, clip, partials, keep_up=True)
        offline = _offline(engine, clip)
        assert final.final and final.tokens == offline.tokens and final.frames == offline.frames
        assert final.text == engine.tokenizer.decode(offline.tokens).strip()
        assert len(partials) == int(seconds / 0.16) and all(not p.final for p in partials)
        assert all(p.session_id == session.id for p in partials)
        assert session.tokens == [] and session.total_samples == 0  # reset for the next utterance
    await batcher.aclose()


def test_chunks_decode_only_new_frames_with_carry(engine):
    """Incremental path (no final pass): each window's new frames, decoded with the carry, in order."""
    config = StreamConfig(chunk_ms=160, left_context_s=0.8, right_context_ms=80, final_pass=False)
    batcher = StreamBatcher(engine, config)
    clip = synthetic_speech(2.0, seed=7)
    session = batcher.open()
    spf, chunk = 1280, 2 * 1280
    windows = 0
    for lo in range(0, len(clip), chunk):
        session.push(clip[lo : lo + chunk])
        request = session.next_request()
        if request is None:
            continue
        windows += 1
        assert request.start_frame - request.window_start_frame <= config.left_frames
        (seq, carry, end), = batcher.process([request])
        session.apply(request, seq, carry, end)
    request = session.next_request(final=True)
    (seq, carry, end), = batcher.process([request])
    session.apply(request, seq, carry, end)
    assert windows >= 10 and session.decoded_frames == -(-len(clip) // spf)

    # the same windows, computed here from the spec: left 10 frames, right 1 frame, chunks of 2
    expected, carry, done = [], None, 0
    total_frames = -(-len(clip) // spf)
    ends = list(range(2, (len(clip) - spf) // spf + 1, 2))
    for end in ends + [None]:
        start = max(0, done - 10)
        stop = len(clip) if end is None else min(len(clip), end * spf + spf)
        enc = engine.encode(*_one(clip[start * spf : stop]))
        last = int(enc.lengths[0]) if end is None else end - start
        seqs, carries = engine.decode(enc, carry=[carry], start_frames=[done - start], end_frames=[last])
        expected += seqs[0].tokens
        carry, done = carries[0], start + last
    assert done == total_frames
    assert session.tokens == expected


def _one(audio: np.ndarray):
    import torch

    return torch.from_numpy(audio).unsqueeze(0), torch.tensor([len(audio)])


async def test_twenty_concurrent_sessions_never_mix(engine):
    batcher = StreamBatcher(engine, StreamConfig(chunk_ms=160, left_context_s=10.0), max_batch=32)
    clips = [synthetic_speech(1.0 + 0.08 * i, seed=100 + i) for i in range(20)]
    partials = [[] for _ in clips]
    rng = random.Random(0)
    outcomes = await asyncio.gather(*[
        _stream(batcher, clip, partials[i], random.Random(rng.random()), keep_up=True)
        for i, clip in enumerate(clips)])
    finals = []
    for i, (session, final) in enumerate(outcomes):
        offline = _offline(engine, clips[i])
        assert final.tokens == offline.tokens, f"session {i}"
        assert all(p.session_id == session.id for p in partials[i])
        assert partials[i], f"session {i} got no partial result"
        finals.append(tuple(final.tokens))
    assert len(set(finals)) == len(finals)  # distinct utterances, so a mix-up could not go unseen
    assert batcher.stats.windows > 1.5 * batcher.stats.ticks  # sessions really shared ticks
    # the same sessions carry on with a second utterance
    session, final = await _stream(batcher, clips[3], [])
    assert final.tokens == _offline(engine, clips[3]).tokens
    await batcher.aclose()


def test_host_encoder_lengths_equal_the_encoders(engine):
    from asr.parakeet.engine import pad_batch

    clips = [np.zeros(n, np.float32) for n in (1, 159, 160, 1279, 1280, 1281, 16000, 34560, 37000)]
    audio, lengths = pad_batch(clips)
    assert engine.encoded_lengths(lengths.tolist()) == engine.encode(audio, lengths).lengths.tolist()
