"""Encoder backends against transformers' own encoder on the same weights.

Tolerances (max |diff| over valid frames of the joint-projected output, tiny model, values ~1):
eager fp32 1e-6 (same code); compiled fp32 1e-5; onnx fp32 1e-4; eager bf16 0.15 (mean 0.03).
The compiled backend is exercised with the ``aot_eager`` compiler here (full dynamo capture, no
C++ codegen); set CADENCE_TEST_INDUCTOR=1 to also run inductor (about a minute per profile here).
"""

from __future__ import annotations

import os

import pytest
import torch

from asr.parakeet.encoders import backend_names, create_encoder, register_backend
from asr.parakeet.encoders.base import EncoderBackend, EncoderOutput
from asr.parakeet.encoders.shape_profiles import ShapeProfile, choose_profiles, parse_profiles, select_profile
from asr.parakeet.loading import load_parakeet


@pytest.fixture
def model(tiny_dir):
    return load_parakeet(tiny_dir).model  # a fresh copy: backends may move it to their dtype


def _features(batch_frames: list[int], seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    lengths = torch.tensor(batch_frames)
    feats = torch.randn(len(batch_frames), int(lengths.max()), 128, generator=gen)
    feats *= (torch.arange(feats.shape[1])[None, :, None] < lengths[:, None, None])
    return feats, lengths


def _transformers(model, feats, lengths) -> EncoderOutput:
    mask = torch.arange(feats.shape[1]).unsqueeze(0) < lengths.unsqueeze(1)
    with torch.inference_mode():
        out = model.float().get_audio_features(input_features=feats, attention_mask=mask)
    return EncoderOutput(out.pooler_output, out.attention_mask.sum(-1).long())


def _max_diff(a: EncoderOutput, b: EncoderOutput) -> float:
    assert torch.equal(a.lengths.cpu(), b.lengths.cpu())
    valid = torch.arange(b.enc_proj.shape[1]).unsqueeze(0) < b.lengths.unsqueeze(1)
    return (a.enc_proj[:, : b.enc_proj.shape[1]].float() - b.enc_proj.float())[valid].abs().max().item()


SHAPES = [[300, 171, 64], [97, 50, 13, 97], [33]]


def test_eager_fp32_is_transformers(tiny_dir):
    ref_model, model = load_parakeet(tiny_dir).model, load_parakeet(tiny_dir).model
    enc = create_encoder("eager", model)
    for shape in SHAPES:
        feats, lengths = _features(shape)
        assert _max_diff(enc(feats, lengths), _transformers(ref_model, feats, lengths)) < 1e-6


def test_eager_bfloat16_close_to_fp32(tiny_dir):
    ref_model, model = load_parakeet(tiny_dir).model, load_parakeet(tiny_dir).model
    enc = create_encoder("eager", model, dtype=torch.bfloat16)
    feats, lengths = _features([300, 171, 64])
    out, ref = enc(feats, lengths), _transformers(ref_model, feats, lengths)
    assert out.enc_proj.dtype == torch.bfloat16
    valid = torch.arange(ref.enc_proj.shape[1]).unsqueeze(0) < ref.lengths.unsqueeze(1)
    diff = (out.enc_proj.float() - ref.enc_proj)[valid].abs()
    assert diff.max() < 0.15 and diff.mean() < 0.03, (diff.max().item(), diff.mean().item())


COMPILERS = ["aot_eager"] + (["inductor"] if os.environ.get("CADENCE_TEST_INDUCTOR") else [])


@pytest.mark.parametrize("compiler", COMPILERS)
def test_compiled_pads_to_the_nearest_profile(tiny_dir, compiler):
    ref_model = load_parakeet(tiny_dir).model
    enc = create_encoder("compiled", load_parakeet(tiny_dir).model, profiles="4x128,2x512",
                         compile_backend=compiler)
    small, long = ShapeProfile("p0", 4, 128), ShapeProfile("p1", 2, 512)
    cases = [([100, 71, 64], small), ([97, 13], small), ([400, 300], long), ([120] * 6, small), ([700], None)]
    for shape, profile in cases:
        feats, lengths = _features(shape)
        before = enc.calls.get(profile, 0)
        assert _max_diff(enc(feats, lengths), _transformers(ref_model, feats, lengths)) < 1e-5
        assert enc.calls.get(profile, 0) > before, (shape, enc.calls)


def test_onnx_dynamic_axes_and_external_data(tiny_dir, tmp_path):
    ref_model = load_parakeet(tiny_dir).model
    path = tmp_path / "enc.onnx"
    enc = create_encoder("onnx", load_parakeet(tiny_dir).model, onnx_path=path, external_data=True)
    assert path.is_file() and path.with_name("enc.onnx.data").stat().st_size > path.stat().st_size
    for shape in SHAPES + [[1500, 1500, 3]]:  # lengths never seen at export time
        feats, lengths = _features(shape)
        assert _max_diff(enc(feats, lengths), _transformers(ref_model, feats, lengths)) < 1e-4
    stamp = path.stat().st_mtime_ns
    create_encoder("onnx", load_parakeet(tiny_dir).model, onnx_path=path)  # reuses the export
    assert path.stat().st_mtime_ns == stamp


def test_registry():
    assert {"eager", "compiled", "onnx"} <= set(backend_names())
    with pytest.raises(ValueError, match="unknown encoder backend 'nope'"):
        create_encoder("nope", None)

    class Fake(EncoderBackend):
        name = "fake"

        def encode(self, features, lengths):
            raise NotImplementedError

    register_backend("fake-test", lambda model, device, dtype, **kw: Fake(model, device, dtype))
    assert isinstance(create_encoder("fake-test", torch.nn.Linear(2, 2)), Fake)


def test_profiles_from_a_length_distribution():
    frames = [150] * 50 + [900] * 30 + [2900] * 20
    profiles = choose_profiles(frames, max_batch=8, count=3)
    # quantile lengths 150 / 900 / 2900 rounded up to the one alignment (64 feature frames)
    assert [p.frames for p in profiles] == [192, 960, 2944] and all(p.batch == 8 for p in profiles)
    assert select_profile(profiles, 3, 192) == ShapeProfile("q0", 8, 192)
    assert select_profile(profiles, 3, 193) == ShapeProfile("q1", 8, 960)
    assert select_profile(profiles, 9, 10) is None
    assert parse_profiles("2x512,4x128") == [ShapeProfile("p1", 4, 128), ShapeProfile("p0", 2, 512)]


def test_shape_options_of_another_backend_are_ignored_with_a_warning(model, caplog):
    # examples/gpu.toml names profiles; the same config with encoder_backend = "eager" (a CPU dry run)
    # must start, saying what it ignored, and still encode as the eager backend does.
    with caplog.at_level("WARNING"):
        enc = create_encoder("eager", model, profiles="4x128")
    assert "takes no profiles: ignored" in caplog.text
    feats, lengths = _features([40])
    assert enc.encode(feats, lengths).lengths.tolist() == [_transformers(model, feats, lengths).lengths.item()]
