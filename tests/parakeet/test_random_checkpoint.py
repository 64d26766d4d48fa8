"""The random-weight checkpoint folder the GPU run points ``asr.model`` at loads like a real one."""

from __future__ import annotations

import json

import numpy as np
import pytest

pytest.importorskip("transformers")


def test_random_checkpoint_folder_loads_and_transcribes_words(tmp_path):
    from asr.parakeet.engine import ParakeetEngine
    from asr.parakeet.random_v3 import write_random_checkpoint as build
    from asr.parakeet.tiny import synthetic_speech

    meta = build(tmp_path / "ckpt", tiny=True)
    assert meta["random_weights"] and meta["vocab"] == 256
    assert json.loads((tmp_path / "ckpt" / "cadence_random.json").read_text())["params_m"] == meta["params_m"]
    engine = ParakeetEngine.from_pretrained(tmp_path / "ckpt", device="cpu")
    assert engine.tokenizer.vocab_size == 256
    [result] = engine.transcribe([synthetic_speech(3.0, seed=1).astype(np.float32)])
    words = result.text.split()
    assert words and all(w.startswith("t") and w[1:].isdigit() for w in words), result.text
    assert [w.text for w in result.words] == words  # word starts come from the stand-in pieces


def test_row_rate_floor_makes_every_row_emit():
    """A random model silent on some rows (blank favoured on every frame) is biased until each row emits."""
    import torch

    from asr.parakeet.decoding.graph_decoder import GraphDecoder
    from asr.parakeet.decoding.label_looping import LabelLoopingDecoder
    from asr.parakeet.random_v3 import floor_row_rate, row_rates, set_blank_bias
    from asr.parakeet.tiny import tiny_model

    model = tiny_model(0)
    decoder = GraphDecoder(LabelLoopingDecoder.from_model(model, dtype=torch.float32), mode="eager")
    gen = torch.Generator().manual_seed(0)
    enc = torch.randn(6, 50, decoder.decoder.joint_hidden, generator=gen)
    enc[:3] *= 0.1  # quiet rows: their frames barely move the joint off the start state
    lengths = [50, 40, 30, 50, 40, 30]
    blank = model.config.blank_token_id
    start = float(model.joint.head.bias[blank])
    # a blank bias at which some rows emit nothing while others still emit
    for bias in np.linspace(start, start + 40, 81):
        set_blank_bias(model, [decoder.decoder], float(bias))
        rates = row_rates(decoder.decode(enc, lengths)[0], lengths)
        if min(rates) == 0 < max(rates):
            break
    else:
        pytest.skip("no bias splits the rows on this seed")
    info = floor_row_rate(model, decoder, enc, lengths, min_rate=0.1)
    assert info["row_rate_min_before"] == 0 and info["row_rate_min"] >= 0.1 and info["blank_bias_lowered"] > 0
    after = row_rates(decoder.decode(enc, lengths)[0], lengths)
    assert min(after) >= 0.1
    assert float(model.joint.head.bias[blank]) == pytest.approx(float(bias) - info["blank_bias_lowered"])
