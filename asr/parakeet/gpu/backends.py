"""Registers the GPU encoder backends with ``asr.parakeet.encoders`` (imported by its plugin hook)."""

from __future__ import annotations

from asr.parakeet.encoders import register_backend

register_backend("cuda_graphs", "asr.parakeet.gpu.graphed_encoder:GraphedEncoder")
register_backend("tensorrt", "asr.parakeet.gpu.tensorrt_backend:TensorRTBackend")
