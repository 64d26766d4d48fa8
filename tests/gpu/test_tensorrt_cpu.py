"""TensorRT backend up to the engine build, with a stand-in for the tensorrt module (CPU only).

TensorRT itself cannot be installed in this project's environments; these tests check the cache
key, the optimization-profile shapes and the builder calls the backend makes.
"""

from __future__ import annotations

import sys
import types
from pathlib import Path

import pytest

from asr.parakeet.encoders import tensorrt_engine as te
from asr.parakeet.encoders.shape_profiles import parse_profiles

PROFILES = parse_profiles("chunk=512x32,segment=128x3072,long=4x30720")


def test_missing_tensorrt_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "tensorrt", None)
    with pytest.raises(ImportError, match=r"cadence\[tensorrt\]"):
        te.import_tensorrt()


def test_profile_shapes_one_per_profile_tuned_at_its_shape() -> None:
    shapes = te.profile_shapes(PROFILES, n_mels=128)
    assert len(shapes) == len(PROFILES)
    for profile, s in zip(PROFILES, shapes, strict=True):
        low, opt, high = s.features
        assert low == (1, 1, 128)
        assert opt == high == (profile.batch, profile.frames, 128)
        assert s.lengths == ((1,), (profile.batch,), (profile.batch,))


def test_engine_key_changes_with_model_profiles_version_precision_arch() -> None:
    base = te.engine_key("abc", PROFILES, "10.9.0", "bf16", "sm_90")
    assert base == te.engine_key("abc", PROFILES, "10.9.0", "bf16", "sm_90")
    variants = [
        te.engine_key("abd", PROFILES, "10.9.0", "bf16", "sm_90"),
        te.engine_key("abc", PROFILES[:2], "10.9.0", "bf16", "sm_90"),
        te.engine_key("abc", PROFILES, "11.0.0", "bf16", "sm_90"),
        te.engine_key("abc", PROFILES, "10.9.0", "fp32", "sm_90"),
        te.engine_key("abc", PROFILES, "10.9.0", "bf16", "sm_100"),
    ]
    assert len({base, *variants}) == 6


class _Recorder:
    """A stand-in for the few tensorrt objects the builder touches; records the calls."""

    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def module(self, parse_ok: bool = True) -> types.ModuleType:
        rec = self
        trt = types.ModuleType("tensorrt")

        class Logger:
            WARNING = 2

            def __init__(self, level: int) -> None:
                self.level = level

        class Profile:
            def set_shape(self, name, low, opt, high):
                rec.calls.append(("set_shape", name, low, opt, high))

        class Config:
            def set_memory_pool_limit(self, pool, size):
                rec.calls.append(("pool", pool, size))

            def set_flag(self, flag):
                rec.calls.append(("flag", flag))

            def add_optimization_profile(self, profile):
                rec.calls.append(("add_profile",))

        class Builder:
            def __init__(self, logger):
                pass

            def create_network(self, flags):
                return object()

            def create_builder_config(self):
                return Config()

            def create_optimization_profile(self):
                return Profile()

            def build_serialized_network(self, network, config):
                rec.calls.append(("build",))
                return b"engine-bytes"

        class OnnxParser:
            num_errors = 0 if parse_ok else 1

            def __init__(self, network, logger):
                pass

            def parse_from_file(self, path):
                rec.calls.append(("parse", path))
                return parse_ok

            def get_error(self, i):
                return "bad node"

        trt.Logger, trt.Builder, trt.OnnxParser = Logger, Builder, OnnxParser
        trt.MemoryPoolType = types.SimpleNamespace(WORKSPACE="workspace")
        trt.BuilderFlag = types.SimpleNamespace(BF16="bf16", FP16="fp16")
        return trt


def test_build_adds_one_optimization_profile_per_shape_profile(tmp_path: Path) -> None:
    rec = _Recorder()
    out = te.build_serialized_engine(rec.module(), tmp_path / "enc.onnx", PROFILES, precision="bf16")
    assert out == b"engine-bytes"
    assert ("flag", "bf16") in rec.calls
    assert sum(1 for c in rec.calls if c[0] == "add_profile") == len(PROFILES)
    feature_shapes = [c for c in rec.calls if c[0] == "set_shape" and c[1] == "features"]
    assert [c[3] for c in feature_shapes] == [(p.batch, p.frames, 128) for p in PROFILES]
    assert rec.calls[-1] == ("build",)


def test_build_reports_parser_errors(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError, match="bad node"):
        te.build_serialized_engine(_Recorder().module(parse_ok=False), tmp_path / "enc.onnx", PROFILES)
    with pytest.raises(ValueError):
        te.build_serialized_engine(_Recorder().module(), tmp_path / "enc.onnx", PROFILES, precision="int3")
