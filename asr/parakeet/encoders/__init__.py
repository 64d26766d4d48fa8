"""Encoder backends, chosen by name (``asr.encoder_backend``): a registry other packages can extend.

Built in: ``eager`` (transformers' encoder as is, fp32/bf16), ``compiled`` (torch.compile per
(batch, frames) shape profile), ``onnx`` (onnxruntime), ``cuda_graphs`` (the FastConformer of
``fast_conformer.py`` replayed as CUDA graphs) and ``tensorrt`` (``cadence[tensorrt]``); all share
``shape_profiles.ShapeProfile``. ``register_backend(name, factory)`` adds one; modules named in
``_PLUGIN_MODULES``, when installed, are imported to register their own.
Every backend maps ``(features [B, F, mels], lengths [B])`` to the joint-projected encoder output
``[B, T, H]`` plus ``T`` lengths, the decoder's input.
"""

from __future__ import annotations

import importlib
import inspect
import logging
from collections.abc import Callable
from typing import Any

from asr.parakeet.encoders.base import EncoderBackend, EncoderOutput

BackendFactory = Callable[..., EncoderBackend]

_REGISTRY: dict[str, BackendFactory | str] = {
    "eager": "asr.parakeet.encoders.eager:EagerEncoder",
    "compiled": "asr.parakeet.encoders.compiled:CompiledEncoder",
    "onnx": "asr.parakeet.encoders.onnx:OnnxEncoder",
    "cuda_graphs": "asr.parakeet.encoders.cuda_graphs:GraphedEncoder",
    "tensorrt": "asr.parakeet.encoders.tensorrt:TensorRTBackend",
}
_PLUGIN_MODULES: tuple[str, ...] = ()

__all__ = ["EncoderBackend", "EncoderOutput", "backend_names", "create_encoder", "register_backend"]


def register_backend(name: str, factory: BackendFactory | str) -> None:
    """Add or replace a backend: a callable ``(model, device, dtype, **options)`` or ``"module:attr"``."""
    _REGISTRY[name] = factory


def backend_names() -> list[str]:
    _load_plugins()
    return sorted(_REGISTRY)


def _load_plugins() -> None:
    for module in _PLUGIN_MODULES:
        try:
            importlib.import_module(module)
        except ModuleNotFoundError as exc:
            if exc.name is None or not module.startswith(exc.name):
                raise


def _resolve(factory: BackendFactory | str) -> BackendFactory:
    if callable(factory):
        return factory
    module, _, attr = factory.partition(":")
    return getattr(importlib.import_module(module), attr)


def create_encoder(name: str, model: Any, device: Any = "cpu", dtype: Any = None, **options: Any) -> EncoderBackend:
    """Build backend ``name`` over a transformers ``ParakeetForTDT``."""
    if name not in _REGISTRY:
        _load_plugins()
    if name not in _REGISTRY:
        raise ValueError(f"unknown encoder backend {name!r} (known: {', '.join(sorted(_REGISTRY))})")
    factory = _resolve(_REGISTRY[name])
    params = inspect.signature(factory).parameters
    if not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        ignored = sorted(k for k in options if k not in params)
        if ignored:  # e.g. asr.profiles with encoder_backend = "eager": shape options of another backend
            logging.getLogger(__name__).warning(
                f"encoder backend {name!r} takes no {', '.join(ignored)}: ignored")
            options = {k: v for k, v in options.items() if k in params}
    return factory(model, device=device, dtype=dtype, **options)
