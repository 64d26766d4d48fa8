"""``torch.compile`` of the fused AdaIN/Snake steps (``KokoroModel.set_compiled``) equals the eager forward.

Runs on the CPU (Inductor's C++ backend; needs a C compiler): the graphs are the ones CUDA builds with
Triton, so what this checks is the capture (dynamic shapes, no recompile per clause length) and the
arithmetic; the H200 speed is measured by ``bench/tts_gpu.py``'s compiled and eager batch rows.
"""

from __future__ import annotations

import shutil

import numpy as np
import pytest
import torch

from tts.kokoro import config as kconfig
from tts.kokoro import fused
from tts.kokoro.checkpoint import build_random, random_voice
from tts.kokoro.layers import Span
from tts.kokoro.model import Utterance

pytestmark = pytest.mark.skipif(shutil.which("cc") is None and shutil.which("gcc") is None,
                                reason="torch.compile on the CPU needs a C compiler")

SENTENCES = [[102, 62, 16, 56, 156, 47, 61, 3], [50, 83, 54, 156, 31, 16, 65, 156, 87, 123, 54, 46, 4], [81, 4]]


def _step_args(b: int, c: int, t: int, lengths: list[int], seed: int) -> tuple:
    g = torch.Generator().manual_seed(seed)
    span = Span.of(lengths, t, torch.device("cpu"), torch.float32)
    z, res = torch.randn(b, c, t, generator=g), torch.randn(b, c, t, generator=g) * span.mask
    style = torch.randn(b, 8, generator=g)
    fc_w, fc_b = torch.randn(2 * c, 8, generator=g) * 0.1, torch.randn(2 * c, generator=g) * 0.1
    norm_w, norm_b = 1 + 0.1 * torch.randn(c, generator=g), 0.1 * torch.randn(c, generator=g)
    alpha = 1 + 0.5 * torch.rand(1, c, 1, generator=g)
    zb = 0.1 * torch.randn(c, generator=g)  # the convolution's bias, added inside the step
    return z, zb, res, style, fc_w, fc_b, norm_w, norm_b, span.mask, span.count, 1e-5, alpha


def test_compiled_step_equals_eager_across_shapes_without_recompiling():
    """One graph serves every batch > 1, channel count and clause length; padding stays zero."""
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    kernels = fused.Kernels(compiled=True)
    frames = torch._dynamo.utils.counters["stats"]
    for b, c, t, lengths in [(3, 16, 40, [40, 23, 7]), (5, 24, 72, [72, 70, 31, 9, 1]), (2, 16, 16, [16, 3])]:
        args = _step_args(b, c, t, lengths, seed=t)
        want_x, want = fused.residual_adain_snake(*args)
        got_x, got = kernels.residual_adain_snake(*args)
        torch.testing.assert_close(got_x, want_x, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
        assert float(got[-1, :, lengths[-1]:].abs().max()) == 0.0  # padded frames stay clean
    assert frames["unique_graphs"] == 1, "a new clause length or batch size must not recompile"


def test_compiled_model_equals_eager():
    model = build_random(kconfig.tiny_config(), seed=4)
    voice = random_voice(model.config, seed=2)
    items = [Utterance(ids, voice[len(ids) - 1, 0], 1.0, seed=i) for i, ids in enumerate(SENTENCES)]
    eager = model.synthesize(items, frame_bucket=8)
    model.set_compiled(True)
    try:
        assert model.compiled
        compiled = model.synthesize(items, frame_bucket=8)
    finally:
        model.set_compiled(False)
    assert compiled.durations == eager.durations
    for got, want in zip(compiled.audio, eager.audio, strict=True):
        assert len(got) == len(want) and np.abs(want).max() > 1e-3
        np.testing.assert_allclose(got, want, atol=1e-5 * np.abs(want).max() + 1e-7, rtol=0)


def test_engine_option_compiles_its_model():
    from tts.kokoro.engine import KokoroEngine
    from tts.kokoro.options import KokoroOptions

    eager = KokoroEngine(KokoroOptions(tiny=True, device="cpu", warmup=False, g2p="chars"))
    compiled = KokoroEngine(KokoroOptions(tiny=True, device="cpu", warmup=False, g2p="chars", compile=True))
    try:
        assert not eager.model.compiled and compiled.model.compiled
        blocks = [m for m in compiled.model.modules() if hasattr(m, "kernels")]
        assert blocks and all(m.kernels.compiled for m in blocks)
    finally:
        eager.close()
        compiled.close()


def test_a_failing_compiled_build_falls_back_to_eager(caplog):
    calls = []

    def broken(*args):
        calls.append(args)
        raise RuntimeError("triton: no C compiler\nmore detail")

    step = fused._guarded("adain_snake", broken, fused.adain_snake)
    args = _step_args(2, 8, 12, [12, 5], seed=0)
    eager_args = (args[0], *args[3:])  # adain_snake's: x and the AdaIN's, no bias or residual
    with caplog.at_level("WARNING", logger="tts.kokoro.fused"):
        first = step(*eager_args)
        second = step(*eager_args)
    assert len(calls) == 1, "after one failure the compiled build is not tried again"
    torch.testing.assert_close(first, fused.adain_snake(*eager_args), rtol=0, atol=0)
    torch.testing.assert_close(second, first, rtol=0, atol=0)
    assert "running it eagerly" in caplog.text and "no C compiler" in caplog.text
