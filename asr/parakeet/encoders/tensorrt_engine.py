"""TensorRT encoder: one engine, one optimization profile per shape profile, one context + stream per profile.

Written against the TensorRT 10/11 Python API (``tensorrt``): named I/O tensors,
``set_optimization_profile_async`` / ``set_input_shape`` / ``set_tensor_address`` /
``execute_async_v3``. The engine is built once from the ONNX export with the BF16 flag and cached
on disk under a key of the model hash, the profiles, the TensorRT version, the precision and the
GPU's compute capability. TensorRT cannot be installed in this project's environments (neither the
CI machine nor the H200 device image has it, and the device has no registry access): everything up
to ``build_serialized_network`` is tested on the CPU with a stand-in module; the build and the
runs themselves have never executed. See ``asr/parakeet/gpu/README.md``.
"""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import torch

from asr.parakeet.encoders.onnx_export import INPUT_FEATURES, INPUT_LENGTHS, OUTPUT_ENCODED, file_digest
from asr.parakeet.encoders.shape_profiles import ShapeProfile, select_profile

log = logging.getLogger(__name__)

TENSORRT_EXTRA_HINT = "pip install 'cadence[tensorrt]'"


def import_tensorrt() -> ModuleType:
    try:
        import tensorrt
    except ImportError as exc:
        raise ImportError(f"the tensorrt encoder backend needs TensorRT 10+: {TENSORRT_EXTRA_HINT}") from exc
    return tensorrt


@dataclass(frozen=True)
class ProfileShapes:
    """min/opt/max input shapes of one TensorRT optimization profile."""

    features: tuple[tuple[int, int, int], tuple[int, int, int], tuple[int, int, int]]
    lengths: tuple[tuple[int], tuple[int], tuple[int]]


def profile_shapes(profiles: list[ShapeProfile], n_mels: int = 128) -> list[ProfileShapes]:
    """One TensorRT profile per shape profile: batch 1..B and frames 1..F, tuned (opt) at B x F.

    Ranges overlap on purpose, so whichever profile :func:`select_profile` picks accepts the request.
    """
    return [
        ProfileShapes(
            features=((1, 1, n_mels), (p.batch, p.frames, n_mels), (p.batch, p.frames, n_mels)),
            lengths=((1,), (p.batch,), (p.batch,)),
        )
        for p in profiles
    ]


def engine_key(
    model_digest: str, profiles: list[ShapeProfile], trt_version: str, precision: str, arch: str
) -> str:
    """Cache key: the engine must be rebuilt when any of these change."""
    payload = {
        "model": model_digest,
        "profiles": [p.spec() for p in profiles],
        "tensorrt": trt_version,
        "precision": precision,
        "arch": arch,
    }
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:24]


def device_arch(device: torch.device | None = None) -> str:
    if not torch.cuda.is_available():
        return "cpu"
    major, minor = torch.cuda.get_device_capability(device)
    return f"sm_{major}{minor}"


def build_serialized_engine(
    trt: ModuleType,
    onnx_path: Path,
    profiles: list[ShapeProfile],
    precision: str = "bf16",
    workspace_bytes: int = 8 << 30,
    n_mels: int = 128,
) -> bytes:
    """Parse the ONNX export and build one engine holding every optimization profile (one copy of weights)."""
    logger = trt.Logger(trt.Logger.WARNING)
    builder = trt.Builder(logger)
    network = builder.create_network(0)  # explicit batch is the only mode in TensorRT 10
    parser = trt.OnnxParser(network, logger)
    if not parser.parse_from_file(str(onnx_path)):
        errors = [str(parser.get_error(i)) for i in range(parser.num_errors)]
        raise RuntimeError(f"TensorRT could not parse {onnx_path}: {errors}")
    config = builder.create_builder_config()
    config.set_memory_pool_limit(trt.MemoryPoolType.WORKSPACE, workspace_bytes)
    if precision == "bf16":
        config.set_flag(trt.BuilderFlag.BF16)
    elif precision == "fp16":
        log.warning(
            "fp16 TensorRT Parakeet engines are known to give NaN/incorrect encoder output; prefer bf16"
        )
        config.set_flag(trt.BuilderFlag.FP16)
    elif precision != "fp32":
        raise ValueError(f"unknown precision {precision!r} (bf16, fp16, fp32)")
    for shapes in profile_shapes(profiles, n_mels):
        opt_profile = builder.create_optimization_profile()
        opt_profile.set_shape(INPUT_FEATURES, *shapes.features)
        opt_profile.set_shape(INPUT_LENGTHS, *shapes.lengths)
        config.add_optimization_profile(opt_profile)
    serialized = builder.build_serialized_network(network, config)
    if serialized is None:
        raise RuntimeError("TensorRT engine build failed (see the TensorRT log above)")
    return bytes(serialized)


class TensorRTEncoder:
    """Runs the cached multi-profile engine: ``encode(features, lengths)`` picks the profile per request."""

    def __init__(
        self,
        onnx_path: str | Path,
        profiles: list[ShapeProfile],
        cache_dir: str | Path,
        precision: str = "bf16",
        device: torch.device | str = "cuda",
        n_mels: int = 128,
    ) -> None:
        self.trt = import_tensorrt()
        self.profiles = list(profiles)
        self.device = torch.device(device)
        self.n_mels = n_mels
        onnx_path = Path(onnx_path)
        key = engine_key(
            file_digest(onnx_path), self.profiles, self.trt.__version__, precision, device_arch(self.device)
        )
        self.engine_path = Path(cache_dir) / f"parakeet-encoder-{key}.engine"
        if self.engine_path.exists():
            serialized = self.engine_path.read_bytes()
        else:
            log.info("building TensorRT engine %s (minutes)", self.engine_path.name)
            serialized = build_serialized_engine(self.trt, onnx_path, self.profiles, precision, n_mels=n_mels)
            self.engine_path.parent.mkdir(parents=True, exist_ok=True)
            self.engine_path.write_bytes(serialized)
        self._runtime = self.trt.Runtime(self.trt.Logger(self.trt.Logger.WARNING))
        self.engine = self._runtime.deserialize_cuda_engine(serialized)
        if self.engine is None:
            raise RuntimeError(f"could not deserialize {self.engine_path}")
        self.contexts: dict[str, tuple[Any, torch.cuda.Stream]] = {}
        for index, profile in enumerate(self.profiles):
            context = self.engine.create_execution_context()
            stream = torch.cuda.Stream(self.device)
            context.set_optimization_profile_async(index, stream.cuda_stream)
            self.contexts[profile.name] = (context, stream)

    def encode(self, features: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        """features (B, T, n_mels) float32 on the device, lengths (B,) int64 -> encoded (B, T', D) float32."""
        batch, frames, _ = features.shape
        profile = select_profile(self.profiles, batch, frames)
        if profile is None:
            raise ValueError(
                f"no TensorRT profile holds batch {batch} x {frames} frames; split or window first"
            )
        context, stream = self.contexts[profile.name]
        features = features.float().contiguous()
        lengths = lengths.to(torch.int64).contiguous()
        context.set_input_shape(INPUT_FEATURES, tuple(features.shape))
        context.set_input_shape(INPUT_LENGTHS, tuple(lengths.shape))
        out = torch.empty(
            tuple(context.get_tensor_shape(OUTPUT_ENCODED)), dtype=torch.float32, device=self.device
        )
        context.set_tensor_address(INPUT_FEATURES, features.data_ptr())
        context.set_tensor_address(INPUT_LENGTHS, lengths.data_ptr())
        context.set_tensor_address(OUTPUT_ENCODED, out.data_ptr())
        stream.wait_stream(torch.cuda.current_stream(self.device))
        if not context.execute_async_v3(stream.cuda_stream):
            raise RuntimeError("TensorRT execute_async_v3 failed")
        torch.cuda.current_stream(self.device).wait_stream(stream)
        for tensor in (features, lengths, out):
            tensor.record_stream(stream)
        return out
