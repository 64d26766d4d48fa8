"""What Kokoro's CUDA graphs rely on, checked on the CPU: the masked BiLSTMs equal packed ones, and the text and
acoustic passes, reading their lengths from device tensors only, give each item what it gets alone when the batch
is padded into a larger bucket (more tokens or frames, extra rows). The captures themselves are CUDA-only
(tests/gpu/test_kokoro_cuda.py)."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from tts.kokoro import config as kconfig  # noqa: E402
from tts.kokoro.checkpoint import build_random, random_voice  # noqa: E402
from tts.kokoro.graph_buckets import plan_rows, split_rows  # noqa: E402
from tts.kokoro.layers import Span, masked_lstm, packed_lstm  # noqa: E402
from tts.kokoro.model import Utterance  # noqa: E402

IDS = [[102, 62, 16, 56, 156, 47, 61, 3], [50, 83, 54, 156, 31, 16, 65, 156, 87, 123, 54, 46, 4], [81, 4]]


@pytest.fixture(scope="module")
def model64():
    model = build_random(kconfig.tiny_config(), seed=3)
    with torch.no_grad():  # spread the durations so items get different alignments
        model.predictor.duration_proj.linear_layer.weight.normal_(0, 3.0)
        model.predictor.duration_proj.linear_layer.bias.fill_(-6.0)
    return model.double()


@pytest.mark.parametrize("bidirectional", [True, False])
def test_masked_lstm_equals_packed(bidirectional: bool) -> None:
    torch.manual_seed(0)
    lstm = torch.nn.LSTM(6, 5, 1, batch_first=True, bidirectional=bidirectional).double().eval()
    lengths = [9, 4, 7, 1]  # not sorted
    x = torch.randn(4, 9, 6, dtype=torch.float64)
    x *= (torch.arange(9)[None, :] < torch.tensor(lengths)[:, None])[:, :, None]  # clean input
    with torch.no_grad():
        masked = masked_lstm(lstm, x, torch.tensor(lengths))
        packed = packed_lstm(lstm, x, lengths)
        alone = [lstm(x[row : row + 1, :n])[0][0] for row, n in enumerate(lengths)]
    assert masked.shape == packed.shape == (4, 9, 5 * (2 if bidirectional else 1))
    torch.testing.assert_close(masked, packed, rtol=0, atol=1e-12)
    for row, n in enumerate(lengths):
        torch.testing.assert_close(masked[row, :n], alone[row], rtol=0, atol=1e-12)
        assert not masked[row, n:].any()


def test_masked_lstm_follows_new_weights() -> None:
    """The one-direction copies are rebuilt when the weights change (a checkpoint loaded after a first call)."""
    lstm = torch.nn.LSTM(3, 2, 1, batch_first=True, bidirectional=True).double().eval()
    x, lens = torch.randn(2, 5, 3, dtype=torch.float64), torch.tensor([5, 5])
    with torch.no_grad():
        before = masked_lstm(lstm, x, lens)
        lstm.load_state_dict({k: v + 0.5 for k, v in lstm.state_dict().items()})
        after = masked_lstm(lstm, x, lens)
        torch.testing.assert_close(after, lstm(x)[0], rtol=0, atol=1e-12)
    assert not torch.allclose(before, after)


def _inputs(model, items: list[Utterance]):
    lengths = [len(it.ids) + 2 for it in items]
    t = max(lengths)
    ids = torch.zeros(len(items), t, dtype=torch.int64)
    for row, it in enumerate(items):
        ids[row, 1 : 1 + len(it.ids)] = torch.tensor(it.ids)
    ref = torch.stack([it.style.reshape(-1) for it in items])
    return ids, torch.tensor(lengths), ref[:, model.style_dim :].clone(), ref[:, : model.style_dim].clone(), \
        torch.tensor([it.speed for it in items], dtype=torch.float64)


def _pad(x: torch.Tensor, rows: int, dim: int, size: int) -> torch.Tensor:
    """``x`` zero-padded to ``rows`` rows and ``size`` along ``dim``, as a graph bucket's buffers hold it."""
    shape = list(x.shape)
    shape[0], shape[dim] = rows, size
    out = torch.zeros(shape, dtype=x.dtype)
    out[tuple(slice(0, n) for n in x.shape)] = x
    return out


def test_text_pass_in_a_larger_bucket_equals_the_batch(model64) -> None:
    voice = random_voice(model64.config, seed=1).double()
    items = [Utterance(ids, voice[len(ids) - 1, 0], speed) for ids, speed in zip(IDS, (1.0, 0.8, 1.25), strict=True)]
    ids, lens, s_pro, _, speed = _inputs(model64, items)
    b, t = ids.shape
    with torch.inference_mode():
        d, dur, t_en = model64.text_pass(ids, Span.of_lens(lens, t, torch.float64), s_pro, speed)
        # the bucket: 8 rows (unused ones hold one token, speed 1), 32 tokens
        big_lens = torch.ones(8, dtype=torch.int64)
        big_lens[:b] = lens
        big_speed = torch.ones(8, dtype=torch.float64)
        big_speed[:b] = speed
        bd, bdur, bt = model64.text_pass(_pad(ids, 8, 1, 32), Span.of_lens(big_lens, 32, torch.float64),
                                         _pad(s_pro, 8, 1, s_pro.shape[1]), big_speed)
    for row, n in enumerate(lens.tolist()):
        assert dur[row, :n].min() >= 1 and not dur[row, n:].any()
        assert torch.equal(bdur[row, :t], dur[row])
        torch.testing.assert_close(bd[row, :t], d[row], rtol=0, atol=1e-10)
        torch.testing.assert_close(bt[row, :, :t], t_en[row], rtol=0, atol=1e-10)
        assert not bdur[row, t:].any() and not bt[row, :, t:].any()
    # and the durations are the ones the batched forward uses
    assert model64.synthesize(items).durations == [dur[row, :n].tolist() for row, n in enumerate(lens.tolist())]


def test_acoustic_pass_in_a_larger_bucket_equals_each_item_alone(model64) -> None:
    """Two items padded to 4 rows (two of length 0) and more frames: each one's audio is its audio alone."""
    voice = random_voice(model64.config, seed=2).double()
    items = [Utterance(ids, voice[len(ids) - 1, 0], 1.0, seed=i) for i, ids in enumerate(IDS[:2])]
    alone = [model64.synthesize([it]) for it in items]
    ids, lens, s_pro, s_dec, speed = _inputs(model64, items)
    spf = model64.samples_per_frame
    with torch.inference_mode():
        d, dur, t_en = model64.text_pass(ids, Span.of_lens(lens, ids.shape[1], torch.float64), s_pro, speed)
        frames = dur.sum(1)
        f = int(frames.max()) + 24  # padded frames past the longest item
        index = torch.zeros(2, f, dtype=torch.int64)
        for row in range(2):
            index[row, : int(frames[row])] = torch.repeat_interleave(torch.arange(dur.shape[1]), dur[row])
        mask = (torch.arange(f)[None, :] < frames[:, None]).double()[:, None, :]
        en = torch.gather(d.transpose(1, 2), 2, index[:, None, :].expand(-1, d.shape[2], -1)) * mask
        asr = torch.gather(t_en, 2, index[:, None, :].expand(-1, t_en.shape[1], -1)) * mask
        noise = torch.zeros(4, f * spf, dtype=torch.float64)
        for row, it in enumerate(items):  # the per-item seeded draw of model._noise
            n = int(frames[row]) * spf
            noise[row, :n] = torch.randn(n, generator=torch.Generator().manual_seed(it.seed), dtype=torch.float64)
        big_frames = torch.zeros(4, dtype=torch.int64)
        big_frames[:2] = frames
        audio = model64.acoustic_pass(_pad(en, 4, 1, en.shape[1]), _pad(asr, 4, 1, asr.shape[1]),
                                      _pad(s_pro, 4, 1, s_pro.shape[1]), _pad(s_dec, 4, 1, s_dec.shape[1]),
                                      big_frames, noise)
    assert audio.shape == (4, f * spf)
    for row, one in enumerate(alone):
        n = len(one.audio[0])
        assert n == int(frames[row]) * spf
        got = audio[row, :n].clamp(-1, 1).float().numpy()  # the model hands out float32
        np.testing.assert_allclose(got, one.audio[0], atol=1e-7, rtol=0)
        assert not audio[row, n:].any()
    assert torch.isfinite(audio).all()


class _StandInBuckets:
    """A graph set's bucket choice and row split without CUDA; ``run`` (per side) pads into the bucket's shape."""

    def __init__(self, model, buckets: list[tuple[int, int]]):
        self.model, self.buckets = model, buckets
        self.replays = self.fallbacks = self.split_batches = 0
        self.shapes: list[tuple[int, int]] = []

    def pick(self, b: int, n: int):
        held = [k for k in self.buckets if k[0] >= b and k[1] >= n]
        return min(held, key=lambda k: k[0] * k[1]) if held else None

    def split(self, lengths: list[int]):
        return split_rows(lengths, self.buckets)

    def plan(self, lengths: list[int]):
        """``DecoderGraphs.plan`` with untimed buckets: each costs its cells."""
        return plan_rows(lengths, {k: float(k[0] * k[1]) for k in self.buckets})

    def _replayed(self, b: int, n: int):
        """The bucket for ``b`` rows of ``n``, counted as a replay; None (counted as a fallback) when none holds."""
        k = self.pick(b, n)
        if k is None:
            self.fallbacks += 1
            return None
        self.replays += 1
        self.shapes.append(k)
        return k


class PaddedBuckets(_StandInBuckets):
    """``DecoderGraphs``' replay without CUDA: the rows zero-padded into a bucket's (batch, frames) buffers and the
    acoustic pass run at that shape, which is what a captured graph computes."""

    def run(self, en, asr, s_pro, style, lens, noise):
        b, f = asr.shape[0], asr.shape[-1]
        k = self._replayed(b, f)
        if k is None:
            return None
        rows, frames = k
        spf = self.model.samples_per_frame
        big_lens = torch.zeros(rows, dtype=torch.int64)
        big_lens[:b] = lens
        audio = self.model.acoustic_pass(_pad(en, rows, 2, frames), _pad(asr, rows, 2, frames),
                                         _pad(s_pro, rows, 1, s_pro.shape[1]), _pad(style, rows, 1, style.shape[1]),
                                         big_lens, _pad(noise, rows, 1, frames * spf))
        return audio[:b, : f * spf]


class PaddedTextBuckets(_StandInBuckets):
    """``TextGraphs``' replay without CUDA: the rows zero-padded into a bucket's (batch, tokens) buffers (spare rows
    one token long, speed 1) and the text pass run at that shape, which is what a captured graph computes."""

    def run(self, ids, lens, s_pro, speed):
        b, t = ids.shape
        k = self._replayed(b, t)
        if k is None:
            return None
        rows, tokens = k
        big_lens = torch.ones(rows, dtype=torch.int64)
        big_lens[:b] = lens
        big_speed = torch.ones(rows, dtype=speed.dtype)
        big_speed[:b] = speed
        d, dur, t_en = self.model.text_pass(_pad(ids, rows, 1, tokens), Span.of_lens(big_lens, tokens, s_pro.dtype),
                                            _pad(s_pro, rows, 1, s_pro.shape[1]), big_speed)
        return d[:b, :t], dur[:b, :t], t_en[:b, :, :t]


def _grouped_equals_eager(model, items: list[Utterance], attr: str, stand_in: _StandInBuckets,
                          longest_fits: bool) -> None:
    """``model.synthesize(items)`` with ``stand_in`` as its ``attr`` graph set (two buckets, of 1 and 2 rows: none
    holds the 3 rows) splits once, replays as expected and gives the eager batch's durations and audio."""
    eager = model.synthesize(items)
    setattr(model, attr, stand_in)
    try:
        grouped = model.synthesize(items)
    finally:
        setattr(model, attr, None)
    assert stand_in.split_batches == 1 and stand_in.fallbacks == (0 if longest_fits else 1)
    k1, k2 = sorted(stand_in.buckets, reverse=True)
    assert sorted(stand_in.shapes, reverse=True) == ([k1, k2] if longest_fits else [k1])
    assert grouped.durations == eager.durations
    for got, want in zip(grouped.audio, eager.audio, strict=True):
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, atol=1e-7, rtol=0)


@pytest.mark.parametrize("longest_fits", [True, False])
def test_a_batch_no_bucket_holds_is_replayed_in_groups(model64, longest_fits: bool) -> None:
    """Run 64: a batch past every bucket ran eagerly (and out of memory on the GPU). It is now replayed in groups of
    rows that each fit a bucket, a row longer than every bucket runs eagerly, and every item's audio is the audio
    the whole batch gets eagerly."""
    voice = random_voice(model64.config, seed=4).double()
    items = [Utterance(ids, voice[len(ids) - 1, 0], 1.0, seed=10 + i) for i, ids in enumerate(IDS)]
    frames = sorted((sum(d) for d in model64.synthesize(items).durations), reverse=True)
    assert frames[0] > frames[1]  # the fixture's durations differ
    top = frames[0] if longest_fits else frames[1]
    _grouped_equals_eager(model64, items, "graphs", PaddedBuckets(model64, [(1, top + 8), (2, top + 8)]),
                          longest_fits)


@pytest.mark.parametrize("longest_fits", [True, False])
def test_a_batch_no_text_bucket_holds_is_replayed_in_groups(model64, longest_fits: bool) -> None:
    """The text side likewise: a batch past every text bucket is replayed in groups of rows (a clause longer than
    every bucket eagerly), with the durations and audio of the whole batch run eagerly."""
    voice = random_voice(model64.config, seed=5).double()
    items = [Utterance(ids, voice[len(ids) - 1, 0], speed, seed=20 + i)
             for i, (ids, speed) in enumerate(zip(IDS, (1.0, 0.8, 1.25), strict=True))]
    lengths = sorted((len(ids) + 2 for ids in IDS), reverse=True)  # tokens with the two boundary ids
    top = lengths[0] if longest_fits else lengths[1]
    _grouped_equals_eager(model64, items, "text_graphs", PaddedTextBuckets(model64, [(1, top + 3), (2, top + 3)]),
                          longest_fits)
