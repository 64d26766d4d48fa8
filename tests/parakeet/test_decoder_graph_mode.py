"""Decoder loop selection (CPU: always the plain loop; CUDA: GraphDecoder in the configured mode) and the
device carry bank path of the stream batcher, checked on the CPU."""

from __future__ import annotations

import asyncio
import random
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from asr.parakeet.batcher import BankedCarry, StreamBatcher
from asr.parakeet.engine import (
    DECODER_GRAPH_MODES,
    ParakeetEngine,
    check_decoder_graph_mode,
    make_graph_decoder,
)
from asr.parakeet.streaming import StreamConfig
from asr.parakeet.tiny import synthetic_speech


@pytest.fixture(scope="module")
def engine(tiny_dir) -> ParakeetEngine:
    return ParakeetEngine.from_pretrained(tiny_dir)


# ---------------------------------------------------------------------------- mode selection
def test_valid_modes_are_normalized() -> None:
    assert DECODER_GRAPH_MODES == ("auto", "conditional", "graphs", "eager")
    for mode in DECODER_GRAPH_MODES:
        assert check_decoder_graph_mode(mode) == mode
        assert check_decoder_graph_mode(f" {mode.upper()} ") == mode


@pytest.mark.parametrize("bad", ["while", "cuda_graphs", "", None, 3])
def test_unknown_mode_is_a_value_error_naming_the_valid_modes(bad) -> None:
    with pytest.raises(ValueError) as info:
        check_decoder_graph_mode(bad)
    message = str(info.value)
    assert "decoder_graph_mode" in message and repr(bad) in message
    assert all(mode in message for mode in DECODER_GRAPH_MODES)


def test_from_pretrained_rejects_an_unknown_mode_before_loading(tmp_path) -> None:
    # tmp_path holds no checkpoint: the mode check must fail first, with the modes named
    with pytest.raises(ValueError, match="auto, conditional, graphs, eager"):
        ParakeetEngine.from_pretrained(tmp_path, decoder_graph_mode="fast")


def test_engine_constructor_rejects_an_unknown_mode(tiny_ckpt) -> None:
    with pytest.raises(ValueError, match="unknown decoder_graph_mode 'graph'"):
        ParakeetEngine(tiny_ckpt, decoder_graph_mode="graph")


@pytest.mark.parametrize("mode", DECODER_GRAPH_MODES)
def test_cpu_always_runs_the_plain_loop(tiny_dir, engine, mode: str) -> None:
    other = ParakeetEngine.from_pretrained(tiny_dir, decoder_graph_mode=mode)
    assert other.decoder_graph_mode == mode
    assert other.graph_decoder is None and engine.graph_decoder is None
    assert make_graph_decoder(other.decoder, mode) is None
    clips = [synthetic_speech(1.3, seed=4), synthetic_speech(0.7, seed=5)]
    got = other.transcribe_tokens(clips)
    want = engine.transcribe_tokens(clips)
    assert [g.tokens for g in got] == [w.tokens for w in want]
    assert [g.frames for g in got] == [w.frames for w in want]


def test_cuda_decoders_get_a_graph_decoder_in_the_requested_mode() -> None:
    """On CUDA the mode goes to GraphDecoder (construction captures nothing, so a stand-in decoder will do)."""
    from asr.parakeet.decoding.graph_decoder import GraphDecoder

    stand_in = SimpleNamespace(device=torch.device("cuda", 0), outer_step=None, inner_step=None)
    for mode in DECODER_GRAPH_MODES:
        graph = make_graph_decoder(stand_in, f" {mode.title()}")
        assert isinstance(graph, GraphDecoder)
        assert graph.decoder is stand_in and graph.requested_mode == mode and graph.runner is None
    with pytest.raises(ValueError, match="auto, conditional, graphs, eager"):
        make_graph_decoder(stand_in, "turbo")


# ---------------------------------------------------------------------------- the shared-batcher factory
def test_shared_batcher_passes_the_mode_and_keys_on_it(monkeypatch) -> None:
    from asr.parakeet import shared_engine  # no pipecat: the loader lives outside the service

    calls: list[dict] = []

    def fake_from_pretrained(source, **kwargs):
        calls.append(kwargs)
        return SimpleNamespace(sample_rate=16000, samples_per_frame=1280, device=torch.device("cpu"),
                               warmup=lambda: None)

    monkeypatch.setattr(shared_engine, "_SHARED", {})
    monkeypatch.setattr(ParakeetEngine, "from_pretrained", staticmethod(fake_from_pretrained))
    base = dict(model="ckpt", device="cpu", dtype="float32", encoder_backend="eager", chunk_ms=160,
                left_context_s=10.0, right_context_ms=0, profiles="")
    graphs = shared_engine.shared_parakeet_batcher(SimpleNamespace(**base, decoder_graph_mode="graphs"))
    assert calls[-1]["decoder_graph_mode"] == "graphs"
    eager = shared_engine.shared_parakeet_batcher(SimpleNamespace(**base, decoder_graph_mode="eager"))
    assert calls[-1]["decoder_graph_mode"] == "eager" and eager is not graphs  # the mode is part of the key
    legacy = shared_engine.shared_parakeet_batcher(SimpleNamespace(**base))  # a config without the field
    assert calls[-1]["decoder_graph_mode"] == "auto" and legacy not in (graphs, eager)
    assert shared_engine.shared_parakeet_batcher(SimpleNamespace(**base, decoder_graph_mode="graphs")) is graphs
    assert len(calls) == 3
    with pytest.raises(ValueError, match="auto, conditional, graphs, eager"):
        shared_engine.shared_parakeet_batcher(SimpleNamespace(**base, decoder_graph_mode="nope"))


# ---------------------------------------------------------------------------- the carry bank path
def test_batcher_uses_the_bank_only_on_cuda_unless_forced(engine) -> None:
    assert not StreamBatcher(engine).use_carry_bank  # CPU engine: per-session DecoderCarry as before
    assert StreamBatcher(engine, carry_bank=True).use_carry_bank


def test_carry_bank_grow_keeps_rows_and_starts_new_ones_fresh(engine) -> None:
    from asr.parakeet.decoding.carry_bank import CarryBank

    bank = CarryBank(engine.decoder, 2)
    bank.h.normal_()
    bank.time_jump[:] = torch.tensor([3, 1])
    h_old = bank.h.clone()
    bank.grow(5)
    assert bank.streams == 5 and bank.h.shape[1] == 5
    assert torch.equal(bank.h[:, :2], h_old) and bank.time_jump.tolist() == [3, 1, 0, 0, 0]
    assert torch.equal(bank.h[:, 4], bank.h0) and torch.equal(bank.pred_out[3], bank.pred0)
    bank.grow(3)  # never shrinks
    assert bank.streams == 5


def _incremental(batcher: StreamBatcher, clip: np.ndarray) -> tuple[list[int], list[int], object]:
    session = batcher.open()
    for lo in range(0, len(clip), 2 * 1280):
        session.push(clip[lo : lo + 2 * 1280])
        request = session.next_request()
        if request is not None:
            (seq, carry, end), = batcher.process([request])
            session.apply(request, seq, carry, end)
    request = session.next_request(final=True)
    (seq, carry, end), = batcher.process([request])
    session.apply(request, seq, carry, end)
    return session.tokens, session.frames, session.carry


def test_bank_path_gives_the_same_incremental_tokens(engine) -> None:
    config = StreamConfig(chunk_ms=160, left_context_s=0.8, right_context_ms=80, final_pass=False)
    plain, banked = StreamBatcher(engine, config), StreamBatcher(engine, config, carry_bank=True)
    for seed in (7, 8):
        clip = synthetic_speech(2.0, seed=seed)
        want_tokens, want_frames, want_carry = _incremental(plain, clip)
        got_tokens, got_frames, got_carry = _incremental(banked, clip)
        assert got_tokens == want_tokens and got_frames == want_frames and want_tokens
        assert isinstance(got_carry, BankedCarry) and not isinstance(want_carry, BankedCarry)


async def _stream(batcher: StreamBatcher, clip: np.ndarray, jitter: random.Random, close: bool = True):
    partials: list = []
    session = batcher.open(on_partial=partials.append)
    for lo in range(0, len(clip), 320):
        batcher.feed(session, clip[lo : lo + 320])
        await asyncio.sleep(jitter.uniform(0, 0.002))
        while batcher.pending(session):
            await asyncio.sleep(0.001)
    final = await batcher.finalize(session)
    if close:
        batcher.close(session)
    return final, partials


async def test_bank_path_matches_the_plain_path_across_concurrent_sessions(engine) -> None:
    # left context 0.4 s: utterances outgrow it, so finals continue from the banked carries; a partial
    # every chunk, so the windows do not depend on the session ids (the cadence's stagger does)
    config = StreamConfig(chunk_ms=160, left_context_s=0.4, partial_interval_ms=0)
    clips = [synthetic_speech(0.8 + 0.1 * i, seed=200 + i) for i in range(10)]
    outcomes = {}
    for use_bank in (False, True):
        batcher = StreamBatcher(engine, config, max_batch=4, carry_bank=use_bank)  # bank starts at 4 rows
        rng = random.Random(0)
        outcomes[use_bank] = await asyncio.gather(*[
            _stream(batcher, clip, random.Random(rng.random()), close=i % 2 == 0) for i, clip in enumerate(clips)])
        if use_bank:
            assert batcher._bank is not None and batcher._bank.streams >= len(clips)  # grew past max_batch
            assert len(batcher._slots) == len(clips) // 2 and len(batcher._free_slots) == len(clips) // 2
            # a new session reuses a freed row and starts fresh there
            final, _ = await _stream(batcher, clips[0], random.Random(1))
            assert final.tokens == outcomes[True][0][0].tokens
        await batcher.aclose()
    for (want, want_partials), (got, got_partials) in zip(outcomes[False], outcomes[True], strict=True):
        assert got.tokens == want.tokens and got.frames == want.frames
        assert [p.tokens for p in got_partials] == [p.tokens for p in want_partials]
    assert len({tuple(f.tokens) for f, _ in outcomes[True]}) == len(clips)  # distinct: a mix-up would show
