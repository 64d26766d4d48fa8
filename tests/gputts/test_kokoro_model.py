"""The batched Kokoro forward computes, per item, what a batch of one computes; the layout is Kokoro-82M's."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tts.kokoro import config as kconfig
from tts.kokoro.checkpoint import build_random, part_state_dict, random_voice
from tts.kokoro.model import PARTS, Utterance

SENTENCES = [  # not sorted by length: the model runs longest first and must answer in this order
    [102, 62, 16, 56, 156, 47, 61, 3],
    [50, 83, 54, 156, 31, 16, 65, 156, 87, 123, 54, 46, 4],
    [81, 4],
]


@pytest.fixture(scope="module")
def model64():
    model = build_random(kconfig.tiny_config(), seed=3)
    with torch.no_grad():  # spread the durations (1..7 frames) so tokens and items get different alignments
        model.predictor.duration_proj.linear_layer.weight.normal_(0, 3.0)
        model.predictor.duration_proj.linear_layer.bias.fill_(-6.0)
    return model.double()


def test_batched_equals_one_by_one(model64):
    voice = random_voice(model64.config, seed=1).double()
    items = [Utterance(ids, voice[len(ids) - 1, 0], speed, seed=i)
             for i, (ids, speed) in enumerate(zip(SENTENCES, (1.0, 0.8, 1.25), strict=True))]
    batched = model64.synthesize(items)
    assert len({d for per in batched.durations for d in per}) > 2, "durations should vary across tokens"
    assert len({len(a) for a in batched.audio}) == len(items)
    for row, item in enumerate(items):
        alone = model64.synthesize([item])
        assert alone.durations[0] == batched.durations[row]
        assert len(alone.audio[0]) == 600 * sum(alone.durations[0])
        assert np.abs(alone.audio[0]).max() > 1e-3
        np.testing.assert_allclose(batched.audio[row], alone.audio[0], atol=1e-9, rtol=0)


def test_float32_batch_matches_within_tolerance():
    model = build_random(kconfig.tiny_config(), seed=4)
    voice = random_voice(model.config, seed=2)
    items = [Utterance(ids, voice[len(ids) - 1, 0], 1.0, seed=i) for i, ids in enumerate(SENTENCES[:2])]
    batched = model.synthesize(items, frame_bucket=8)
    for row, item in enumerate(items):
        alone = model.synthesize([item]).audio[0]
        assert np.abs(batched.audio[row] - alone).max() < 1e-4


def test_full_size_layout_is_kokoro_82m():
    """Kokoro-82M v1.0's checkpoint holds 81,763,410 numbers in 25 / 2 / 146 / 24 / 375 keys per part
    (without the InstanceNorm affine pairs it was trained without); so must ours."""
    model = build_random(kconfig.full_config(), seed=0)
    keys, numbers = {}, 0
    for name in PARTS:
        sd = {k: v for k, v in part_state_dict(getattr(model, name)).items()
              if not k.endswith((".norm.weight", ".norm.bias"))}
        keys[name] = len(sd)
        numbers += sum(v.numel() for v in sd.values())
    assert numbers == 81_763_410
    assert keys == {"bert": 25, "bert_encoder": 2, "predictor": 122, "text_encoder": 24, "decoder": 375}
    assert model.samples_per_frame == 600 and model.sample_rate == 24000


def test_albert_matches_transformers():
    transformers = pytest.importorskip("transformers")
    from tts.kokoro.albert import Albert

    plbert = {"hidden_size": 32, "num_attention_heads": 4, "intermediate_size": 48, "max_position_embeddings": 64,
              "num_hidden_layers": 3, "embedding_size": 16}
    torch.manual_seed(0)
    ours = Albert(178, plbert).eval()
    ref = transformers.AlbertModel(transformers.AlbertConfig(vocab_size=178, **plbert)).eval()
    missing = ref.load_state_dict(ours.state_dict(), strict=False)
    assert not missing.missing_keys, missing
    ids = torch.randint(1, 178, (2, 11))
    ids[1, 7:] = 0
    valid = ids > 0
    valid[:, 0] = True
    with torch.no_grad():
        got = ours(ids, valid)
        want = ref(ids, attention_mask=valid.long()).last_hidden_state
    torch.testing.assert_close(got[0], want[0], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(got[1, :7], want[1, :7], atol=1e-5, rtol=1e-5)


def _resblock_as_kokoro(block, x, s, span):
    """ISTFTNet's AdaINResBlock1 forward as Kokoro writes it (every convolution with its bias), masked."""
    m = span.mask
    for c1, c2, n1, n2, a1, a2 in zip(block.convs1, block.convs2, block.adain1, block.adain2, block.alpha1,
                                      block.alpha2, strict=True):
        xt = n1(x, s, span)
        xt = (xt + (1 / a1) * torch.sin(a1 * xt) ** 2) * m
        xt = n2(c1(xt), s, span)
        xt = (xt + (1 / a2) * torch.sin(a2 * xt) ** 2) * m
        x = c2(xt) * m + x
    return x


def test_resblock_without_conv_bias_passes_equals_kokoros():
    """The generator's resblocks run their convolutions without the bias pass (the first one's bias is removed by the
    AdaIN after it, the second's is added in the next fused step): the same output as each convolution with its bias."""
    from tts.kokoro.layers import AdaINResBlock1, Span

    torch.manual_seed(0)
    block = AdaINResBlock1(16, 7, (1, 3, 5), style_dim=8).double()
    with torch.no_grad():
        for conv in [*block.convs1, *block.convs2]:
            conv.bias.normal_(0, 0.5)  # large biases, so a dropped or doubled one shows
    span = Span.of([40, 23, 9], 40, torch.device("cpu"), torch.float64)
    x = torch.randn(3, 16, 40, dtype=torch.float64) * span.mask
    s = torch.randn(3, 8, dtype=torch.float64)
    with torch.no_grad():
        want = _resblock_as_kokoro(block, x, s, span)
        got = block(x, s, span)
        z, zb, rest = block.parts(x, s, span)
    torch.testing.assert_close(got, want, rtol=1e-9, atol=1e-9)
    torch.testing.assert_close((z + zb[:, None]) * span.mask + rest, want, rtol=1e-9, atol=1e-9)
    assert torch.equal(zb, block.convs2[-1].bias)
