"""The process-wide Parakeet engine and stream batcher, and where the checkpoint comes from.

No pipecat here: the pipecat service (``stt_service``) and the offline tools load through it.
"""

from __future__ import annotations

import re
import threading
from pathlib import Path
from typing import Any

from asr.parakeet.batcher import StreamBatcher, stream_window_frames
from asr.parakeet.streaming import StreamConfig

_SHARED: dict[tuple, StreamBatcher] = {}
_SHARED_LOCK = threading.Lock()
TINY_DIR = Path.home() / ".cache" / "cadence" / "parakeet-tiny"


def resolve_parakeet_model(asr_config: Any) -> str:
    """The configured checkpoint, or (empty ``asr.model``) a tiny random one built offline on first use."""
    if asr_config.model:
        return str(asr_config.model)
    if not (TINY_DIR / "config.json").is_file():
        from loguru import logger

        from asr.parakeet.tiny import make_tiny_checkpoint

        logger.warning(f"asr.model is empty: building a tiny RANDOM Parakeet checkpoint in {TINY_DIR} "
                       "(plumbing demo only: its words are nonsense)")
        make_tiny_checkpoint(TINY_DIR)
    return str(TINY_DIR)


def stream_max_batch(asr_config: Any) -> int:
    """``asr.stream_max_batch``, or (0) 256 windows per tick on CUDA and 32 elsewhere."""
    configured = int(getattr(asr_config, "stream_max_batch", 0) or 0)
    if configured < 0:
        raise ValueError(f"asr.stream_max_batch must be >= 0, got {configured}")
    return configured or (256 if str(asr_config.device).startswith("cuda") else 32)


def stream_config(asr_config: Any) -> StreamConfig:
    """The stream settings of ``asr_config`` (``partial_interval_ms`` absent: the StreamConfig default)."""
    interval = getattr(asr_config, "partial_interval_ms", None)
    if interval is None:
        interval = StreamConfig.partial_interval_ms
    if int(interval) < 0:
        raise ValueError(f"asr.partial_interval_ms must be >= 0, got {interval}")
    return StreamConfig(chunk_ms=int(asr_config.chunk_ms), left_context_s=float(asr_config.left_context_s),
                        right_context_ms=int(asr_config.right_context_ms), partial_interval_ms=int(interval))


def stream_profiles(asr_config: Any, stream: StreamConfig, max_batch: int) -> str:
    """The encoder profiles for streaming: the configured ones, or for ``cuda_graphs`` on CUDA a set
    fitted to the stream windows at the partial cadence and the batch (full and half windows, one graph
    per batch step: ``asr.parakeet.batcher.stream_encoder_profiles``), or "" (backend defaults).

    A configured profile may give its frames as ``full`` or ``half`` (``s64=64xfull``): the longest window at
    the partial cadence, or half of it, so the graphs follow ``asr.partial_interval_ms`` and the left context."""
    configured = str(getattr(asr_config, "profiles", "") or "")
    if configured:
        return window_sized(configured, stream)
    if asr_config.encoder_backend != "cuda_graphs" or not str(asr_config.device).startswith("cuda"):
        return configured
    from asr.parakeet.batcher import stream_encoder_profiles

    return stream_encoder_profiles(stream, max_batch)


def window_sized(profiles: str, stream: StreamConfig) -> str:
    """``profiles`` with each ``xfull`` / ``xhalf`` replaced by the frames of ``stream``'s longest window at the
    partial cadence, or of half of it (``asr.parakeet.batcher.stream_encoder_profiles``' two sizes)."""
    if "full" not in profiles and "half" not in profiles:
        return profiles
    full, half = stream_window_frames(stream)
    sizes = {"full": full, "half": half}
    return re.sub(r"x\s*(full|half)\b", lambda m: f"x{sizes[m.group(1)]}", profiles)


def shared_parakeet_batcher(asr_config: Any, max_batch: int | None = None) -> StreamBatcher:
    """One engine and one batcher per (model, device, dtype, backend, streaming shape, batch, decoder
    graph mode, profiles) in the process."""
    from asr.parakeet.engine import ParakeetEngine, check_decoder_graph_mode

    model = resolve_parakeet_model(asr_config)
    stream = stream_config(asr_config)
    graph_mode = check_decoder_graph_mode(getattr(asr_config, "decoder_graph_mode", "auto") or "auto")
    max_batch = max_batch or stream_max_batch(asr_config)
    profiles = stream_profiles(asr_config, stream, max_batch)
    key = (model, asr_config.device, asr_config.dtype, asr_config.encoder_backend, stream, max_batch,
           profiles, graph_mode)
    with _SHARED_LOCK:
        if key not in _SHARED:
            options = {}
            if profiles:  # shape profiles for the compiled / cuda_graphs / tensorrt backends
                options["profiles"] = profiles
            engine = ParakeetEngine.from_pretrained(model, device=asr_config.device, dtype=asr_config.dtype,
                                                    encoder_backend=asr_config.encoder_backend,
                                                    decoder_graph_mode=graph_mode, **options)
            if getattr(engine, "graph_decoder", None) is not None:  # one capture at the largest tick (as the bench)
                engine.graph_decoder.ensure(max_batch, max(64, engine.encoded_lengths([stream.max_window_samples])[0]))
            engine.warmup()
            _SHARED[key] = StreamBatcher(engine, stream, max_batch=max_batch)
        return _SHARED[key]


def warm_parakeet(asr_config: Any) -> None:
    """Load (and warm) the shared engine before the first caller arrives."""
    shared_parakeet_batcher(asr_config)
