"""A tick's windows grouped by length for the encoder: the plan, and the same frames as one padded call."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from asr.parakeet.batcher import stream_encoder_profiles
from asr.parakeet.encoders.shape_profiles import parse_profiles
from asr.parakeet.engine import REPLAY_OVERHEAD_COST, ParakeetEngine, length_groups, pad_batch
from asr.parakeet.streaming import StreamConfig
from asr.parakeet.tiny import synthetic_speech

PROFILES = parse_profiles(stream_encoder_profiles(StreamConfig(), 256))


def test_the_agents_stream_profiles_hold_full_and_half_windows():
    config = StreamConfig()
    full = [p for p in PROFILES if p.name.startswith("s")]
    half = [p for p in PROFILES if p.name.startswith("h")]
    lag = [p for p in PROFILES if p.name == "lag"]
    assert {p.frames for p in full} == {1088} and config.max_window_samples // 160 + 1 <= 1088
    assert {p.frames for p in half} == {576} and max(p.batch for p in half) == 128
    assert max(p.batch for p in full) == 256 and lag and lag[0].frames == 2 * 1088
    assert len(PROFILES) == 10 + 8 + 1  # each one is a compile + capture at start-up


def test_groups_split_only_where_the_padding_saved_beats_a_replay():
    few_long = [300] * 20 + [1000] * 2
    assert length_groups(few_long, PROFILES) == [list(range(22))]  # 2 long rows: one call at 1088 is cheaper
    many_short = [300] * 100 + [1000] * 2
    assert length_groups(many_short, PROFILES) == [list(range(100)), [100, 101]]
    assert length_groups([300] * 5, PROFILES) == [list(range(5))]
    mixed = [1000, 200, 3000, 250] * 40  # 3000 frames: past every profile, its own bucket
    groups = length_groups(mixed, PROFILES)
    assert sorted(i for g in groups for i in g) == list(range(len(mixed)))
    assert [sorted({mixed[i] for i in g}) for g in groups] == [[200, 250], [1000], [3000]]
    # with no cost per replay any split that saves padding is taken; with a huge one, never
    assert len(length_groups(few_long, PROFILES, overhead=0.0)) == 2
    assert len(length_groups(many_short, PROFILES, overhead=100 * REPLAY_OVERHEAD_COST)) == 1


@pytest.fixture(scope="module")
def profiled_engine(tiny_dir) -> ParakeetEngine:
    """The profiled backend on the CPU (no graphs, no compile): the engine's grouping path runs for real."""
    return ParakeetEngine.from_pretrained(tiny_dir, encoder_backend="cuda_graphs",
                                          profiles="s8=8x576,s64=64x576,h8=8x256,h64=64x256", compile=False)


def test_grouped_encode_gives_every_row_the_frames_of_one_padded_call(profiled_engine):
    engine = profiled_engine
    rng = np.random.default_rng(0)
    seconds = [5.5, 0.4, 1.1, 5.2, 2.3, 0.9, 1.7] + list(rng.uniform(0.2, 2.4, 13))
    clips = [synthetic_speech(s, seed=500 + i) for i, s in enumerate(seconds)]
    audio, lengths = pad_batch(clips)
    groups = engine._length_groups(lengths)
    assert groups is not None and len(groups) == 2 and sorted(groups[1]) == [0, 3]  # the two long ones apart
    want = engine.encode(audio, lengths)
    got = engine.encode(audio, lengths, by_length=True)
    assert got.lengths.tolist() == want.lengths.tolist() == engine.encoded_lengths(lengths.tolist())
    for i, n in enumerate(want.lengths.tolist()):
        torch.testing.assert_close(got.enc_proj[i, :n], want.enc_proj[i, :n], atol=1e-5, rtol=1e-5)
    seqs, _ = engine.decode(got)
    assert [s.tokens for s in seqs] == [s.tokens for s in engine.decode(want)[0]]
    assert sum(len(s.tokens) for s in seqs) > 50


def test_grouping_is_off_without_cost_ranked_profiles(tiny_dir):
    engine = ParakeetEngine.from_pretrained(tiny_dir)  # eager backend: nothing to group for
    audio, lengths = pad_batch([np.zeros(16000, np.float32), np.zeros(80000, np.float32)])
    assert engine._length_groups(lengths) is None
    assert engine.encode(audio, lengths, by_length=True).lengths.tolist() == engine.encoded_lengths([16000, 80000])
