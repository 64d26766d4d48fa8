"""Streaming sessions and the multi-session batcher on a tiny checkpoint."""

from __future__ import annotations

import asyncio
import random

import numpy as np
import pytest

from asr.parakeet.batcher import StreamBatcher
from asr.parakeet.engine import ParakeetEngine
from asr.parakeet.streaming import StreamConfig, StreamSession
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


def _partial_ends(session_id: int, config: StreamConfig, total_samples: int) -> list[int]:
    """Frames a caught-up session's partials end at: its staggered grid, up to the last whole chunk."""
    c, p = config.chunk_frames, config.partial_frames
    slots = p // c
    first = p - ((session_id % slots) * c if slots > 1 else 0)
    ready = total_samples // config.samples_per_frame // c * c
    return list(range(first, ready + 1, p))


async def test_final_equals_offline_at_the_agents_defaults(engine):
    """10 s left context, 160 ms chunks, a partial every 640 ms (staggered): finals are the offline
    transcript, partials come on the session's grid and each decodes every frame since the last."""
    config = StreamConfig()
    assert (config.left_context_s, config.chunk_ms, config.partial_interval_ms) == (10.0, 160, 640)
    batcher = StreamBatcher(engine, config)
    firsts = set()
    for seed, seconds in [(1, 2.3), (2, 3.1), (3, 0.5), (4, 1.7), (5, 4.4)]:
        clip = synthetic_speech(seconds, seed=seed)
        partials: list = []
        windows = batcher.stats.windows
        session, final = await _stream(batcher, clip, partials, keep_up=True)
        offline = _offline(engine, clip)
        assert final.final and final.tokens == offline.tokens and final.frames == offline.frames
        assert final.text == engine.tokenizer.decode(offline.tokens).strip()
        ends = _partial_ends(session.id, batcher.config, len(clip))
        assert [round(p.audio_s * 16000) // 1280 // 2 * 2 for p in partials] == ends
        assert all(not p.final and p.session_id == session.id for p in partials)
        assert batcher.stats.windows - windows == len(ends) + 1  # only due windows were encoded
        for earlier, later in zip(partials, partials[1:], strict=False):  # partials only grow
            assert later.tokens[: len(earlier.tokens)] == earlier.tokens
        assert session.tokens == [] and session.total_samples == 0  # reset for the next utterance
        firsts.add(ends[0] if ends else None)
    assert len(firsts - {None}) >= 3  # the first partial's frame is staggered across sessions
    await batcher.aclose()


async def test_every_chunk_gives_a_partial_with_interval_zero(engine):
    batcher = StreamBatcher(engine, StreamConfig(chunk_ms=160, left_context_s=10.0, partial_interval_ms=0))
    for seed, seconds in [(1, 2.3), (3, 0.5)]:
        clip = synthetic_speech(seconds, seed=seed)
        partials: list = []
        session, final = await _stream(batcher, clip, partials, keep_up=True)
        assert final.tokens == _offline(engine, clip).tokens
        assert len(partials) == int(seconds / 0.16) and all(not p.final for p in partials)
    await batcher.aclose()


def test_partial_interval_rounds_up_to_whole_chunks_and_sizes_the_window():
    assert StreamConfig(partial_interval_ms=0).partial_frames == 2
    assert StreamConfig(partial_interval_ms=100).partial_frames == 2
    assert StreamConfig(partial_interval_ms=480).partial_frames == 6
    assert StreamConfig(partial_interval_ms=500).partial_frames == 8
    config = StreamConfig()
    assert config.partial_frames == 8
    assert config.max_window_samples == (125 + 8 + 2) * 1280  # left + interval + a chunk of slack
    assert config.window_samples == (125 + 2) * 1280


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
    assert 0 < batcher.stats.device_s < batcher.stats.busy_s  # the engine's calls are part of each tick's time
    # the same sessions carry on with a second utterance
    session, final = await _stream(batcher, clips[3], [])
    assert final.tokens == _offline(engine, clips[3]).tokens
    await batcher.aclose()


def test_host_encoder_lengths_equal_the_encoders(engine):
    from asr.parakeet.engine import pad_batch

    clips = [np.zeros(n, np.float32) for n in (1, 159, 160, 1279, 1280, 1281, 16000, 34560, 37000)]
    audio, lengths = pad_batch(clips)
    assert engine.encoded_lengths(lengths.tolist()) == engine.encode(audio, lengths).lengths.tolist()


def test_cadence_windows_decode_every_frame_since_the_last_partial(engine):
    """Incremental path at a 480 ms cadence: a window only when the partial is due, covering all new
    chunks with the full left context before the first of them; computed here from the spec."""
    config = StreamConfig(chunk_ms=160, left_context_s=0.8, partial_interval_ms=480, final_pass=False)
    batcher = StreamBatcher(engine, config)
    clip = synthetic_speech(3.0, seed=9)
    session = batcher.open()
    spf, chunk = 1280, 2 * 1280
    windows = []
    for lo in range(0, len(clip), chunk):
        session.push(clip[lo : lo + chunk])
        if not session.partial_due():
            assert session.has_chunk() or session.ready_end_frame() == session.decoded_frames
            continue
        request = session.next_request()
        windows.append((request.window_start_frame, request.start_frame, request.end_frame))
        (seq, carry, end), = batcher.process([request])
        session.apply(request, seq, carry, end)
    request = session.next_request(final=True)
    (seq, carry, end), = batcher.process([request])
    session.apply(request, seq, carry, end)

    first = 6 - (session.id % 3) * 2
    ends = list(range(first, len(clip) // spf // 2 * 2 + 1, 6))
    assert [w[2] for w in windows] == ends and len(ends) >= 5
    expected, carry, done = [], None, 0
    for end in ends + [None]:
        start = max(0, done - 10)
        stop = len(clip) if end is None else end * spf
        enc = engine.encode(*_one(clip[start * spf : stop]))
        last = int(enc.lengths[0]) if end is None else end - start
        seqs, carries = engine.decode(enc, carry=[carry], start_frames=[done - start], end_frames=[last])
        expected += seqs[0].tokens
        carry, done = carries[0], start + last
    assert session.tokens == expected and expected


async def test_finals_go_first_and_the_tick_holds_only_due_windows(engine):
    batcher = StreamBatcher(engine, StreamConfig(), max_batch=3)
    ticks: list[list[tuple[int, bool]]] = []
    process = batcher.process

    def recording(requests, slots=None):
        ticks.append([(r.session.id, r.final) for r in requests])
        return process(requests, slots)

    batcher.process = recording
    clip = synthetic_speech(1.3, seed=12)
    sessions = [batcher.open() for _ in range(5)]
    for session in sessions:  # 1.28 s each: every session owes a partial (its first grid point is <= 8 frames)
        batcher.feed(session, clip[: 16 * 1280])
    quiet = batcher.open()
    batcher.feed(quiet, clip[: 2 * 1280 - 1])  # less than a chunk: nothing due, never encoded
    final_session = sessions[-1]
    final = batcher.request_final(final_session)
    assert [j.session.id for j in batcher._take()] == [final_session.id, sessions[0].id, sessions[1].id]
    result = await final
    assert result.final and result.tokens == _offline(engine, clip[: 16 * 1280]).tokens
    while any(batcher.pending(s) for s in sessions):
        await asyncio.sleep(0.001)
    assert ticks[0] == [(final_session.id, True), (sessions[0].id, False), (sessions[1].id, False)]
    encoded = [sid for tick in ticks for sid, _ in tick]
    assert quiet.id not in encoded
    assert sorted(encoded) == sorted(s.id for s in sessions)  # one window each: the due partials, the final
    await batcher.aclose()


async def test_a_requested_partial_comes_before_the_cadence(engine):
    batcher = StreamBatcher(engine, StreamConfig(partial_interval_ms=2000))
    partials: list = []
    session = batcher.open(on_partial=partials.append)
    while session.next_partial_frame <= 4:  # the grid is staggered by id: take one whose first partial is later
        batcher.close(session)
        session = batcher.open(on_partial=partials.append)
    first = session.next_partial_frame
    clip = synthetic_speech(1.0, seed=13)
    batcher.feed(session, clip[: 4 * 1280])  # 2 chunks, short of the first grid point
    await asyncio.sleep(0.05)
    assert not partials and not batcher.pending(session)
    batcher.request_partial(session)
    while batcher.pending(session):
        await asyncio.sleep(0.001)
    assert len(partials) == 1 and partials[0].audio_s == 4 * 1280 / 16000
    assert not session.partial_requested
    batcher.feed(session, clip[4 * 1280 : 5 * 1280])
    await asyncio.sleep(0.05)
    assert len(partials) == 1 and session.next_partial_frame == first  # back on the cadence
    await batcher.aclose()


def test_session_audio_appends_in_place_and_window_views_never_change():
    config = StreamConfig(left_context_s=0.4, partial_interval_ms=0)
    session = StreamSession(config)
    rng = np.random.default_rng(4)
    clip = rng.standard_normal(16000 * 3).astype(np.float32)
    held = []  # (view, its content then): what a worker thread could still be reading
    buffers = set()
    for lo in range(0, len(clip), 320):
        session.push(clip[lo : lo + 320])
        buffers.add(id(session._buf))
        assert np.array_equal(session.audio, clip[session.base_sample : lo + 320])
        request = session.next_request()
        if request is not None:
            held.append((request.audio, request.audio.copy()))
            session.decoded_frames = request.end_frame  # as apply() does, then trims
            session._trim()
    assert session.base_sample > 0 and len(held) > 10
    assert all(np.array_equal(view, then) for view, then in held)
    assert len(buffers) < 12  # grown 1.5x at a time, not copied per push (150 pushes)
    session.reset()
    assert len(session.audio) == 0 and session.total_samples == 0


async def test_a_tick_that_does_not_finish_reads_as_stalled(engine):
    """The engine's watchdog (agent/engine_watchdog.py) reads ``stalled_s``: 0 while idle, the tick's age while a
    tick waits on the device (here: the batched call held, the CPU stand-in for a hung GPU), 0 again after."""
    import time

    from testkit.held_call import held_call

    batcher = StreamBatcher(engine, StreamConfig())
    try:
        with held_call(batcher, "_process_on_stream") as release:
            assert batcher.stalled_s() == 0.0
            session = batcher.open()
            batcher.feed(session, synthetic_speech(0.5, seed=7))
            final = asyncio.ensure_future(batcher.finalize(session))
            await asyncio.sleep(0.3)
            assert batcher.stalled_s() >= 0.25
            t0 = time.monotonic()
            release.set()
            assert (await asyncio.wait_for(final, 30)).final and time.monotonic() - t0 < 30
            assert batcher.stalled_s() == 0.0
    finally:
        await batcher.aclose()
