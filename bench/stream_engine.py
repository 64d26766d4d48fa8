"""Real ``ParakeetEngine`` instances over random-weight models, for the streaming-batcher bench and its CUDA tests.

- :func:`v3_engine`: the v3-sized model (627 M parameters) with the emission calibration of the other
  benches (``asr.parakeet.random_v3.calibrated_model``), bf16, ``cuda_graphs`` encoder profiles; CUDA only.
- :func:`tiny_engine`: ``asr.parakeet.tiny.tiny_model`` (about 0.3 tokens per encoder frame on
  speech-like audio), fp32 on the CPU, without the SentencePiece training.

Neither needs pipecat, sentencepiece or a checkpoint on disk: the tokenizer is ``asr.parakeet.tiny.IdTokenizer``.
"""

from __future__ import annotations

from typing import Any

import torch

from asr.parakeet.encoders.shape_profiles import streaming_profiles
from asr.parakeet.engine import ParakeetEngine
from asr.parakeet.streaming import StreamConfig
from asr.parakeet.tiny import checkpoint, tiny_model

# 2.16 s streaming windows (2 s left context + a 160 ms chunk: 217 feature frames) at the batch
# steps of asr.parakeet.encoders.shape_profiles.streaming_profiles up to 256 (what `cadence serve` builds for
# the same stream config), plus a longer profile for sessions that fell behind. Before run 13 the
# bench used the four batch sizes of bench/streaming_sim.py (COARSE_STREAM_PROFILES): a tick of 65
# windows paid for 128 (encoder 7 -> 12.6 ms on the H200), which made the next tick bigger still.
STREAM_PROFILES = streaming_profiles(StreamConfig(left_context_s=2.0).window_samples, 256)
COARSE_STREAM_PROFILES = "s16=16x256,s64=64x256,s128=128x256,s256=256x256,lag=64x512"


def tiny_engine(device: str = "cpu", seed: int = 0, **engine_options: Any) -> ParakeetEngine:
    """A ``ParakeetEngine`` over ``asr.parakeet.tiny.tiny_model`` (fp32, eager encoder unless told otherwise)."""
    return ParakeetEngine(checkpoint(tiny_model(seed), "random-tiny"), device=device, **engine_options)


def v3_engine(
    profiles: str | None = STREAM_PROFILES,
    decoder_dtype: str = "float32",
    decoder_graph_mode: str = "auto",
    encoder_backend: str = "cuda_graphs",
    target_rate: float = 0.3,
    graph_features: bool = True,
) -> tuple[ParakeetEngine, dict[str, Any]]:
    """The v3-sized calibrated random model as a CUDA ``ParakeetEngine`` (bf16 encoder); and its calibration.

    ``decoder_dtype`` float32 is the engine's (and the agent's) default; bench/streaming_sim.py used bf16.
    """
    from asr.parakeet.random_v3 import calibrated_model

    model, emission = calibrated_model(target=target_rate)
    options: dict[str, Any] = {"profiles": profiles} if profiles else {}  # cuda_graphs' name=BxF format
    engine = ParakeetEngine(checkpoint(model, "random-v3"), device="cuda", dtype=torch.bfloat16,
                            encoder_backend=encoder_backend, decoder_dtype=decoder_dtype,
                            decoder_graph_mode=decoder_graph_mode, graph_features=graph_features, **options)
    return engine, emission
