"""Our forward against hexgrad's ``kokoro`` package (``KModel.forward_with_tokens``) on the same checkpoint.

Runs where that package's source is importable: ``KOKORO_SRC=<folder holding kokoro/>``, else ``.venv/kokoro-ref``
(``scripts/install.sh --test`` unpacks ``pip download --no-deps kokoro==0.9.4`` there; its ``__init__`` needs misaki,
so only ``kokoro.model`` and its modules are loaded), or an installed ``kokoro``. Full-size model on the CPU:
seconds to a minute.
Noise is off in both (the source's Gaussian noise is random by design).
"""

from __future__ import annotations

import importlib
import os
import sys
import types

import numpy as np
import pytest
import torch

from tts.kokoro import config as kconfig
from tts.kokoro import model as kmodel
from tts.kokoro.checkpoint import build_random, random_voice, save_checkpoint


def _reference_kmodel():
    src = os.environ.get("KOKORO_SRC")
    default = os.path.join(os.path.dirname(__file__), "..", "..", ".venv", "kokoro-ref")
    if not src and os.path.isfile(os.path.join(default, "kokoro", "model.py")):
        src = default
    if src:
        pkg = types.ModuleType("kokoro")
        pkg.__path__ = [os.path.join(src, "kokoro")]
        sys.modules.setdefault("kokoro", pkg)
    try:
        return importlib.import_module("kokoro.model").KModel
    except ImportError:
        pytest.skip("hexgrad's kokoro is not importable (set KOKORO_SRC)")


def test_matches_hexgrad_kokoro(tmp_path, monkeypatch):
    KModel = _reference_kmodel()
    ours = build_random(kconfig.full_config(), seed=11)
    with torch.no_grad():  # keep the random model's audio inside [-1, 1] (ours clips, Kokoro does not)
        ours.decoder.generator.conv_post.weight.mul_(0.1)
        ours.decoder.generator.conv_post.bias.fill_(-3.0)
    path = save_checkpoint(ours, tmp_path / "kokoro-v1_0.pth")
    ref = KModel(repo_id="hexgrad/Kokoro-82M", config=dict(ours.config), model=str(path)).eval()
    voice = random_voice(ours.config, seed=3)[:, 0]
    ids = [50, 83, 54, 156, 31, 16, 65, 156, 87, 123, 54, 46, 3, 16, 50, 156, 39, 16, 69, 123, 16, 52, 63, 6]
    with monkeypatch.context() as m:
        m.setattr(torch, "randn_like", lambda x, *a, **k: torch.zeros_like(x))
        want, want_dur = ref.forward_with_tokens(torch.LongTensor([[0, *ids, 0]]), voice[len(ids) - 1][None], 1.0)
    monkeypatch.setattr(kmodel, "_noise", lambda items, lengths, total, dev, dtype: torch.zeros(len(items), total,
                                                                                                 dtype=dtype))
    got = ours.synthesize([kmodel.Utterance(ids, voice[len(ids) - 1], 1.0)])
    assert got.durations[0] == want_dur.tolist()
    want = want.numpy()
    assert got.audio[0].shape == want.shape
    assert np.abs(want).max() > 1e-3
    assert np.linalg.norm(got.audio[0] - want) / np.linalg.norm(want) < 5e-3
