"""The real streaming path on CUDA: ``ParakeetEngine``'s decoder graph modes against the CPU plain loop, and
``StreamBatcher`` with its device ``CarryBank`` (20 concurrent sessions, no mixing, rows reused after close),
a partial every chunk and at the agent's defaults (10 s left context, a partial every 640 ms, staggered,
finals first; profiles derived as the agent derives them, windows grouped by length).

CUDA only; the CPU versions are tests/parakeet/test_streaming.py and test_decoder_graph_mode.py. Needs
torch and transformers; no pipecat, sentencepiece, conftest or pytest plugin (async tests run under
``asyncio.run``)::

    python3 -m pytest -q -p no:cacheprovider tests/gpu/test_stream_batcher_cuda.py
"""

from __future__ import annotations

import asyncio
import copy
import random
from collections.abc import Iterator

import numpy as np
import pytest
import torch

pytest.importorskip("transformers")

from asr.parakeet.batcher import BankedCarry, StreamBatcher, stream_encoder_profiles  # noqa: E402
from asr.parakeet.decoding.label_looping import DecodedSeq  # noqa: E402
from asr.parakeet.encoders import EncoderOutput  # noqa: E402
from asr.parakeet.encoders.shape_profiles import parse_profiles  # noqa: E402
from asr.parakeet.engine import ParakeetEngine, length_groups, pad_batch  # noqa: E402
from asr.parakeet.streaming import StreamConfig, StreamResult, StreamSession  # noqa: E402
from asr.parakeet.tiny import (  # noqa: E402
    checkpoint,
    synthetic_speech,  # noqa: E402
    tiny_model,
)

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]

FRAME = 320  # 20 ms of 16 kHz audio, what a transport delivers
CHUNK = 2 * 1280  # 160 ms: two encoder frames
EVERY_CHUNK = StreamConfig(chunk_ms=160, left_context_s=10.0, partial_interval_ms=0)


def partial_ends(session: StreamSession, samples: int) -> list[int]:
    """Frames a caught-up session's partials end at: its staggered grid, up to the last whole chunk."""
    config = session.config
    first = config.partial_frames - session.partial_offset
    ready = samples // config.samples_per_frame // config.chunk_frames * config.chunk_frames
    return list(range(first, ready + 1, config.partial_frames))


@pytest.fixture(scope="module")
def model() -> torch.nn.Module:
    """The tiny test checkpoint's model (fp32, CPU, ~0.3 tokens per frame); every engine takes a copy."""
    return tiny_model(seed=3)


@pytest.fixture(scope="module", autouse=True)
def exact_fp32() -> Iterator[None]:
    """No TF32 in cuBLAS/cuDNN, so CUDA fp32 stays within ~1e-6 of the CPU and token argmaxes agree."""
    saved = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    yield
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved


def make_engine(model: torch.nn.Module, device: str, mode: str = "auto") -> ParakeetEngine:
    """fp32 engine, eager encoder, on its own copy of ``model`` (the eager backend moves its model)."""
    return ParakeetEngine(checkpoint(copy.deepcopy(model)), device=device, decoder_graph_mode=mode)


def assert_same(got: list[DecodedSeq], want: list[DecodedSeq]) -> None:
    assert [g.tokens for g in got] == [w.tokens for w in want]
    assert [g.frames for g in got] == [w.frames for w in want]
    assert [g.durations for g in got] == [w.durations for w in want]


# ---------------------------------------------------------------------------- (a) the engine's decoder modes
@pytest.mark.parametrize("mode", ["conditional", "graphs", "eager"])
def test_cuda_engine_decodes_like_the_cpu_plain_loop(model: torch.nn.Module, mode: str) -> None:
    if mode == "conditional":
        pytest.importorskip("cuda.bindings")
    cpu, gpu = make_engine(model, "cpu"), make_engine(model, "cuda", mode)
    assert cpu.graph_decoder is None and gpu.graph_decoder is not None
    clips = [synthetic_speech(s, seed=40 + i) for i, s in enumerate((3.7, 1.1, 6.2, 0.5, 2.4))]
    audio, lengths = pad_batch(clips)
    enc = cpu.encode(audio, lengths)
    enc_cuda = EncoderOutput(enc.enc_proj.to("cuda"), enc.lengths.to("cuda"))

    # 1. the decoder alone, on the same encoder output: identical tokens, frames, durations, carries
    want, want_carry = cpu.decode(enc)
    got, got_carry = gpu.decode(enc_cuda)
    assert gpu.graph_decoder.mode is not None and gpu.graph_decoder.mode.value == mode  # no silent fallback
    assert_same(got, want)
    assert sum(len(w.tokens) for w in want) > 30  # a real workload, not all blanks
    for g, w in zip(got_carry, want_carry, strict=True):
        assert int(g.last_label) == int(w.last_label) and int(g.time_jump) == int(w.time_jump)
        torch.testing.assert_close(g.h.cpu(), w.h, atol=1e-4, rtol=1e-4)

    # 2. chunk by chunk (2 frames, as 160 ms chunks) from the carries: the same again, and the whole decode
    carry_cpu: list | None = None
    carry_gpu: list | None = None
    tokens_cpu: list[list[int]] = [[] for _ in clips]
    tokens_gpu: list[list[int]] = [[] for _ in clips]
    for lo in range(0, enc.enc_proj.shape[1], 2):
        starts = torch.clamp(enc.lengths, max=lo).tolist()
        ends = torch.clamp(enc.lengths, max=lo + 2).tolist()
        part_cpu, carry_cpu = cpu.decode(enc, carry=carry_cpu, start_frames=starts, end_frames=ends)
        part_gpu, carry_gpu = gpu.decode(enc_cuda, carry=carry_gpu, start_frames=starts, end_frames=ends)
        assert_same(part_gpu, part_cpu)
        for i, (c, g) in enumerate(zip(part_cpu, part_gpu, strict=True)):
            tokens_cpu[i] += c.tokens
            tokens_gpu[i] += g.tokens
    assert tokens_gpu == tokens_cpu == [w.tokens for w in want]

    # 3. end to end: features + encoder + decoder on the GPU
    got_enc = gpu.encode(audio, lengths)
    assert torch.equal(got_enc.lengths.cpu(), enc.lengths)
    for i, n in enumerate(enc.lengths.tolist()):
        torch.testing.assert_close(got_enc.enc_proj[i, :n].cpu(), enc.enc_proj[i, :n], atol=1e-3, rtol=1e-3)
    assert_same(gpu.transcribe_tokens(clips), cpu.transcribe_tokens(clips))


# ---------------------------------------------------------------------------- (b) StreamBatcher + CarryBank
async def stream(batcher: StreamBatcher, clip: np.ndarray, jitter: random.Random
                 ) -> tuple[StreamSession, StreamResult, list[StreamResult]]:
    """Feed ``clip`` in 20 ms frames, waiting for each chunk's tick (a real-time caller on a fast engine)."""
    partials: list[StreamResult] = []
    session = batcher.open(on_partial=partials.append)
    for lo in range(0, len(clip), FRAME):
        batcher.feed(session, clip[lo : lo + FRAME])
        await asyncio.sleep(jitter.uniform(0, 0.002))
        while batcher.pending(session):
            await asyncio.sleep(0.001)
    final = await batcher.finalize(session)
    return session, final, partials


def incremental_reference(batcher: StreamBatcher, clip: np.ndarray, session_id: int | None = None
                          ) -> tuple[list[list[int]], StreamResult]:
    """One session alone, chunk by chunk through ``process``, a window whenever a partial is due (with
    ``session_id``: on that session's staggered grid): partial token lists and the final."""
    session = batcher.open()
    if session_id is not None:
        batcher.close(session)
        session = StreamSession(batcher.config, id=session_id)
    partials: list[list[int]] = []
    for lo in range(0, len(clip), CHUNK):
        session.push(clip[lo : lo + CHUNK])
        request = session.next_request() if session.partial_due() else None
        if request is not None:
            (seq, carry, end), = batcher.process([request])
            partials.append(session.apply(request, seq, carry, end).tokens)
    request = session.next_request(final=True)
    assert request is not None
    (seq, carry, end), = batcher.process([request])
    final = session.apply(request, seq, carry, end)
    batcher.close(session)
    return partials, final


async def twenty_sessions_final_pass(engine: ParakeetEngine, config: StreamConfig = EVERY_CHUNK,
                                     long_clips: int = 0) -> None:
    assert StreamBatcher(engine).use_carry_bank  # the default on CUDA
    batcher = StreamBatcher(engine, config, max_batch=32)
    clips = [synthetic_speech(1.0 + 0.08 * i, seed=100 + i) for i in range(20 - long_clips)]
    clips += [synthetic_speech(6.0 + 0.7 * i, seed=150 + i) for i in range(long_clips)]  # still within 10 s
    offline = [engine.transcribe_tokens([clip])[0] for clip in clips]
    rng = random.Random(0)
    outcomes = await asyncio.gather(*[stream(batcher, clip, random.Random(rng.random())) for clip in clips])
    assert batcher._bank is not None and batcher._bank.last_label.device.type == "cuda"
    for i, (session, final, partials) in enumerate(outcomes):
        assert final.final and final.session_id == session.id
        assert final.tokens == offline[i].tokens and final.frames == offline[i].frames, f"session {i}"
        assert partials and all(p.session_id == session.id and not p.final for p in partials), f"session {i}"
        assert [round(p.audio_s * 16000) // CHUNK * 2 for p in partials] == partial_ends(session, len(clips[i]))
    assert len({tuple(f.tokens) for _, f, _ in outcomes}) == len(clips)  # distinct: a mix-up would show
    if config.partial_interval_ms == 0:
        assert batcher.stats.windows > 1.5 * batcher.stats.ticks  # sessions really shared ticks
    else:  # a window every 4 chunks per session: fewer per tick, but the staggered starts coincide
        assert batcher.stats.max_windows >= 3

    # every session holds its own bank row; closing gives every row back
    rows = {session.id: batcher._slots[session.id] for session, _, _ in outcomes}
    assert len(set(rows.values())) == len(clips)
    bank, streams = batcher._bank, batcher._bank.streams
    for session, _, _ in outcomes:
        batcher.close(session)
    assert batcher._slots == {} and sorted(batcher._free_slots) == sorted(rows.values())

    # new sessions take freed rows, start fresh there, and the bank does not grow
    again = [3, 7, 11, 15, 19]
    second = await asyncio.gather(*[stream(batcher, clips[i], random.Random(i)) for i in again])
    for i, (session, final, partials) in zip(again, second, strict=True):
        assert batcher._slots[session.id] in rows.values()
        assert final.tokens == offline[i].tokens and final.frames == offline[i].frames, f"reused row, clip {i}"
        assert partials
    assert batcher._bank is bank and bank.streams == streams
    await batcher.aclose()


async def twenty_sessions_incremental(engine: ParakeetEngine, partial_interval_ms: int = 0) -> None:
    # left context 0.4 s: the utterances outgrow it, so partials and finals continue from the banked carries
    config = StreamConfig(chunk_ms=160, left_context_s=0.4, partial_interval_ms=partial_interval_ms)
    seconds = 0.8 if partial_interval_ms == 0 else 2.0  # at a cadence: several partials per utterance
    clips = [synthetic_speech(seconds + 0.06 * i, seed=200 + i) for i in range(20)]
    plain = StreamBatcher(engine, config, carry_bank=False)
    batcher = StreamBatcher(engine, config, max_batch=8)  # the bank starts at 8 rows and must grow
    rng = random.Random(1)
    outcomes = await asyncio.gather(*[stream(batcher, clip, random.Random(rng.random())) for clip in clips])
    # the same windows for one session alone, per-session carries (on the streamed session's grid)
    reference = [incremental_reference(plain, clip, session.id) for clip, (session, _, _) in zip(
        clips, outcomes, strict=True)]
    assert batcher._bank is not None and batcher._bank.streams >= len(clips)
    for i, ((session, final, partials), (want_partials, want_final)) in enumerate(
            zip(outcomes, reference, strict=True)):
        assert final.tokens == want_final.tokens and final.frames == want_final.frames, f"session {i}"
        assert [p.tokens for p in partials] == want_partials, f"session {i}"
        assert all(p.session_id == session.id for p in partials)
    assert len({tuple(f.tokens) for _, f, _ in outcomes}) == len(clips)
    if partial_interval_ms == 0:
        assert batcher.stats.windows > 1.5 * batcher.stats.ticks
    else:
        assert batcher.stats.max_windows >= 3
    # mid-utterance the sessions' carries are bank markers for their own rows
    session = batcher.open()
    session.push(clips[0][:CHUNK])
    request = session.next_request()
    assert request is not None
    (seq, carry, end), = batcher.process([request])
    assert carry == BankedCarry(batcher._slots[session.id])
    await batcher.aclose()


def test_twenty_sessions_finals_equal_offline_and_bank_rows_are_reused(model: torch.nn.Module) -> None:
    asyncio.run(twenty_sessions_final_pass(make_engine(model, "cuda")))


def test_twenty_sessions_incremental_through_the_bank_match_per_session_carries(model: torch.nn.Module) -> None:
    asyncio.run(twenty_sessions_incremental(make_engine(model, "cuda")))


# ---------------------------------------------------------------------------- (c) features captured with the encoder
def graphed_engine(model: torch.nn.Module) -> ParakeetEngine:
    """fp32 ``cuda_graphs`` engine: log-mel + encoder as one graph per profile (not compiled: fast to build)."""
    engine = ParakeetEngine(checkpoint(copy.deepcopy(model)), device="cuda", encoder_backend="cuda_graphs",
                            profiles="s8=8x128,s32=32x256,l32=32x1024", compile=False)
    assert engine.graphed_features
    return engine


def test_features_in_the_encoder_graph_match_the_eager_engine_over_stale_buffers(model: torch.nn.Module) -> None:
    eager, graphed = make_engine(model, "cuda"), graphed_engine(model)
    long_clips = [synthetic_speech(1.0 + 0.3 * i, seed=300 + i) for i in range(6)]
    short_clips = [clip[: 4000 + 700 * i] for i, clip in enumerate(long_clips[:3])]  # after the long ones
    for clips in (long_clips, short_clips, long_clips):
        audio, lengths = pad_batch(clips)
        want, got = eager.encode(audio, lengths), graphed.encode(audio, lengths)
        assert got.lengths.tolist() == want.lengths.tolist() == graphed.encoded_lengths(lengths.tolist())
        for i, n in enumerate(want.lengths.tolist()):
            torch.testing.assert_close(got.enc_proj[i, :n], want.enc_proj[i, :n], atol=1e-3, rtol=1e-3)
    assert set(graphed.encoder._captured_audio) >= {"s8", "s32"} and not graphed.encoder._captured


def test_twenty_sessions_on_the_graphed_features_engine(model: torch.nn.Module) -> None:
    asyncio.run(twenty_sessions_final_pass(graphed_engine(model)))
    asyncio.run(twenty_sessions_incremental(graphed_engine(model)))


# ---------------------------------------------------------------------------- (d) the agent's defaults
def agents_engine(model: torch.nn.Module, max_batch: int = 32) -> ParakeetEngine:
    """fp32 ``cuda_graphs`` engine with the profiles the agent derives for StreamConfig() (full and half
    windows at the partial cadence), not compiled (fast to build)."""
    profiles = stream_encoder_profiles(StreamConfig(), max_batch)
    engine = ParakeetEngine(checkpoint(copy.deepcopy(model)), device="cuda", encoder_backend="cuda_graphs",
                            profiles=profiles, compile=False)
    assert engine.graphed_features
    return engine


def test_twenty_sessions_at_the_agents_defaults_finals_equal_offline(model: torch.nn.Module) -> None:
    engine = agents_engine(model)
    asyncio.run(twenty_sessions_final_pass(engine, StreamConfig(), long_clips=4))  # 4 clips past half a window
    asyncio.run(twenty_sessions_incremental(engine, partial_interval_ms=640))


def test_windows_grouped_by_length_on_the_graphs_match_one_padded_call(model: torch.nn.Module) -> None:
    eager, engine = make_engine(model, "cuda"), agents_engine(model, max_batch=64)
    clips = [synthetic_speech(8.0, seed=600), synthetic_speech(9.5, seed=601)]
    clips += [synthetic_speech(0.5 + 0.07 * i, seed=602 + i) for i in range(60)]  # 60 short: worth a 2nd replay
    audio, lengths = pad_batch(clips)
    groups = engine._length_groups(lengths)
    assert groups == length_groups([n // 160 + 1 for n in lengths.tolist()], parse_profiles(
        stream_encoder_profiles(StreamConfig(), 64)))
    assert groups is not None and [sorted(g) for g in groups][-1] == [0, 1]  # two long windows on their own
    got, want = engine.encode(audio, lengths, by_length=True), eager.encode(audio, lengths)
    assert got.lengths.tolist() == want.lengths.tolist()
    for i, n in enumerate(want.lengths.tolist()):
        torch.testing.assert_close(got.enc_proj[i, :n], want.enc_proj[i, :n], atol=1e-3, rtol=1e-3)
    assert_same(engine.decode(got)[0], eager.decode(want)[0])
