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
