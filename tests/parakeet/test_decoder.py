"""The label-looping TDT decoder against a plain NeMo-semantics oracle and transformers' generate()."""

from __future__ import annotations

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from asr.parakeet.decoding.label_looping import LabelLoopingDecoder
from asr.parakeet.tiny import encode_clips, synthetic_speech
from tests.parakeet.reference import max_symbols_on_a_frame, reference_decode

SECONDS = [0.3, 1.1, 2.0, 2.7, 3.6, 0.9]  # varied lengths in one batch


@pytest.fixture(scope="module")
def batch(tiny_ckpt):
    clips = [synthetic_speech(s, seed=10 + i) for i, s in enumerate(SECONDS)]
    enc, lengths = encode_clips(tiny_ckpt.model, clips)
    return clips, enc, lengths


@pytest.fixture(scope="module")
def decoder(tiny_ckpt) -> LabelLoopingDecoder:
    return LabelLoopingDecoder.from_model(tiny_ckpt.model)


def test_matches_the_nemo_oracle_over_a_batch(decoder, batch):
    _, enc, lengths = batch
    seqs, carries = decoder.decode(enc, lengths)
    total = 0
    for i, seq in enumerate(seqs):
        ref = reference_decode(decoder, enc[i], int(lengths[i]))
        assert (seq.tokens, seq.frames, seq.durations) == (ref.tokens, ref.frames, ref.durations)
        assert int(carries[i].time_jump) == ref.time_jump
        torch.testing.assert_close(carries[i].pred_out, ref.state[2])
        torch.testing.assert_close(carries[i].h, ref.state[0])
        total += len(seq.tokens)
    rate = total / float(lengths.sum())
    assert 0.1 < rate < 0.6, f"emission rate {rate:.2f} tokens/frame is not speech-like"
    assert len({d for s in seqs for d in s.durations}) >= 3  # jumps of several lengths occur


def _generate_tokens(model, feats, mask, enc_lengths) -> list[list[int]]:
    """Emitted tokens from transformers' generate(): steps taken before each element ran out of frames."""
    out = model.generate(input_features=feats, attention_mask=mask)
    blank = model.config.blank_token_id
    result = []
    for seq, durs, n in zip(out.sequences.tolist(), out.durations.tolist(), enc_lengths.tolist(), strict=True):
        frame, tokens = 0, []
        for tok, dur in zip(seq[1:], durs[1:], strict=True):  # position 0: the start token
            if frame >= n:
                break
            if tok != blank:
                tokens.append(tok)
            frame += dur
        result.append(tokens)
    return result


def test_matches_transformers_generate(tiny_ckpt, decoder, batch):
    from asr.parakeet.features import LogMelFeatures

    clips, enc, lengths = batch
    audio = torch.zeros(len(clips), max(len(c) for c in clips))
    for i, clip in enumerate(clips):
        audio[i, : len(clip)] = torch.from_numpy(clip)
    feats, frames = LogMelFeatures()(audio, torch.tensor([len(c) for c in clips]))
    mask = torch.arange(feats.shape[1]).unsqueeze(0) < frames.unsqueeze(1)
    expected = _generate_tokens(tiny_ckpt.model, feats, mask, lengths)
    seqs, _ = decoder.decode(enc, lengths)
    for i, seq in enumerate(seqs):
        # transformers applies no 10-symbol cap: compare only where the cap never bites
        assert max_symbols_on_a_frame(reference_decode(decoder, enc[i], int(lengths[i]))) < 10
        assert seq.tokens == expected[i], f"element {i}"
    assert sum(len(t) for t in expected) > 20


def test_ten_symbol_cap_forces_a_frame_forward(tiny_ckpt, batch):
    decoder = LabelLoopingDecoder.from_model(tiny_ckpt.model)
    blank = decoder.blank_id
    with torch.no_grad():  # labels always win, always with duration 0: only the cap moves time
        decoder.joint_head.bias[blank] = -1e4
        decoder.joint_head.bias[decoder.num_labels] = 1e4
    _, enc, lengths = batch
    seqs, _ = decoder.decode(enc[:3], lengths[:3])
    for i, seq in enumerate(seqs):
        n = int(lengths[i])
        assert len(seq.tokens) == 10 * n
        assert seq.frames == [f for f in range(n) for _ in range(10)]
        ref = reference_decode(decoder, enc[i], n)
        assert seq.tokens == ref.tokens


@pytest.mark.parametrize("cuts", [[7], [1, 2, 3, 5, 8, 13, 21, 30], list(range(2, 48, 2))])
def test_chunks_with_carry_equal_one_shot(decoder, batch, cuts):
    _, enc, lengths = batch
    i = 4  # the longest clip
    n = int(lengths[i])
    full, _ = decoder.decode(enc[i : i + 1], lengths[i : i + 1])
    bounds = [0] + [c for c in cuts if c < n] + [n]
    tokens, frames, carry = [], [], None
    for lo, hi in zip(bounds[:-1], bounds[1:], strict=True):
        seqs, carries = decoder.decode(enc[i : i + 1, lo:hi], [hi - lo], carry=[carry])
        tokens += seqs[0].tokens
        frames += [lo + f for f in seqs[0].frames]
        carry = carries[0]
    assert tokens == full[0].tokens
    assert frames == full[0].frames


def test_start_frames_decode_a_window_of_each_row(decoder, batch):
    _, enc, lengths = batch
    starts = [0, 3, 5, 1, 10, 2]
    seqs, _ = decoder.decode(enc, lengths, start_frames=starts)
    for i, seq in enumerate(seqs):
        ref = reference_decode(decoder, enc[i], int(lengths[i]), start=starts[i])
        assert (seq.tokens, seq.frames) == (ref.tokens, ref.frames)


def test_empty_rows_and_a_reused_larger_state(decoder, batch):
    _, enc, lengths = batch
    state = decoder.alloc(8, enc.shape[1] + 5)
    seqs, _ = decoder.decode(enc[:2], torch.tensor([0, int(lengths[1])]), state=state)
    assert seqs[0].tokens == []
    again, _ = decoder.decode(enc[1:2], lengths[1:2], state=state)
    assert again[0].tokens == seqs[1].tokens


class _OpLog(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.ops: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops.append(str(func))
        return func(*args, **(kwargs or {}))


def test_loop_bodies_are_graph_capturable(decoder, batch):
    """No host sync (.item / bool), no nonzero or masked indexing, no reallocation of state buffers."""
    _, enc, lengths = batch
    state = decoder.alloc(enc.shape[0], enc.shape[1])
    decoder.prepare(state, enc, lengths)
    pointers = {k: v.data_ptr() for k, v in vars(state).items() if isinstance(v, torch.Tensor)}
    log = _OpLog()
    steps = 0
    while bool(state.outer_active):
        with log:
            decoder.outer_step(state)
        while bool(state.inner_active):
            with log:
                decoder.inner_step(state)
            steps += 1
    assert steps > 0
    forbidden = {"aten._local_scalar_dense.default", "aten.nonzero.default", "aten.masked_select.default",
                 "aten.index.Tensor", "aten.index_put_.default", "aten.item.default"}
    assert forbidden.isdisjoint(log.ops), sorted(forbidden & set(log.ops))
    assert {k: v.data_ptr() for k, v in vars(state).items() if isinstance(v, torch.Tensor)} == pointers
    assert state.outer_active.dim() == 0 and state.inner_active.dim() == 0


def test_matches_the_oracle_with_many_labels_per_frame(tiny_ckpt, batch):
    """Duration 0 favoured: several labels per frame and some 10-symbol caps, mixed with blanks."""
    decoder = LabelLoopingDecoder.from_model(tiny_ckpt.model)
    with torch.no_grad():
        decoder.joint_head.bias[decoder.num_labels] += 2.5
        decoder.joint_head.bias[decoder.blank_id] -= 1.0
    _, enc, lengths = batch
    seqs, _ = decoder.decode(enc, lengths)
    caps = 0
    for i, seq in enumerate(seqs):
        ref = reference_decode(decoder, enc[i], int(lengths[i]))
        assert (seq.tokens, seq.frames, seq.durations) == (ref.tokens, ref.frames, ref.durations)
        caps += max_symbols_on_a_frame(ref) == 10
    same_frame = sum(a == b for s in seqs for a, b in zip(s.frames, s.frames[1:], strict=False))
    assert same_frame > 20 and caps >= 1
