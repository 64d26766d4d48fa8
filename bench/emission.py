"""Tune a random-weight model's blank bias until our decoder emits a speech-like token rate."""

from __future__ import annotations

from typing import Any

import torch

from asr.parakeet.decoding.label_looping import DecodedSeq


def tokens_per_frame(results: list[DecodedSeq], enc_lengths: list[int]) -> float:
    return sum(len(r.tokens) for r in results) / max(1, sum(enc_lengths))


def set_blank_bias(model: Any, decoders: list[Any], value: float) -> None:
    """Set the blank logit bias in the model and in every decoder's copy of the joint."""
    blank = model.config.blank_token_id
    with torch.no_grad():
        model.joint.head.bias[blank] = value
        for decoder in decoders:
            decoder.joint_head.bias[blank] = value


def tune_blank_bias(
    model: Any,
    graph_decoder: Any,
    enc: torch.Tensor,
    enc_lengths: list[int],
    target: float = 0.3,
    span: float = 6.0,
    iters: int = 12,
) -> dict[str, Any]:
    """Bisect the blank bias so tokens per encoder frame ~= ``target`` (rate falls as the bias rises)."""
    blank = model.config.blank_token_id
    base = float(model.joint.head.bias[blank])
    lo, hi = base - span, base + span
    rate = 0.0
    for _ in range(iters):
        mid = 0.5 * (lo + hi)
        set_blank_bias(model, [graph_decoder.decoder], mid)
        results, _ = graph_decoder.decode(enc, enc_lengths)
        rate = tokens_per_frame(results, enc_lengths)
        if rate > target:
            lo = mid
        else:
            hi = mid
    return {"blank_bias": 0.5 * (lo + hi), "tokens_per_frame": rate, "target": target}


def count_steps(decoder: Any, state: Any) -> tuple[int, int]:
    """Run the plain loop on a prepared state, counting outer (predictor) and inner (joint-only) steps."""
    outer = inner = 0
    while bool(state.outer_active):
        decoder.outer_step(state)
        outer += 1
        while bool(state.inner_active):
            decoder.inner_step(state)
            inner += 1
    return outer, inner


def calibrated_model(
    target: float = 0.3, clips: int = 16, seconds: float = 30.0, seed: int = 0
) -> tuple[Any, dict]:
    """The v3-sized random model with the joint biased so our decoder emits ``target`` tokens per frame.

    Durations are spread first (``calibrate_emission``), then the blank bias is bisected on
    ``clips`` random clips encoded by the (uncompiled) FastConformer.
    """
    from asr.parakeet.decoding.graph_decoder import GraphDecoder
    from asr.parakeet.decoding.label_looping import LabelLoopingDecoder
    from asr.parakeet.encoders.fast_conformer import FastConformer
    from asr.parakeet.gpu.frontend_graphs import host_encoder_lengths
    from asr.parakeet.gpu.log_mel import LogMel
    from bench.common import calibrate_emission, make_model, random_audio

    model = make_model(seed=seed)
    audio = random_audio(clips, seconds, seed=seed + 100)
    samples = torch.full((clips,), audio.shape[1], device=audio.device)
    with torch.inference_mode():
        feats, frames = LogMel().to(audio.device)(audio, samples)
        enc = FastConformer(model.encoder, model.encoder_projector).to_device(audio.device)(feats, frames)
    info = calibrate_emission(model, enc[: min(clips, 8)].reshape(-1, enc.shape[-1]))
    enc_lengths = host_encoder_lengths(samples.cpu().numpy()).tolist()
    decoder = GraphDecoder(LabelLoopingDecoder.from_model(model, dtype=torch.bfloat16))
    info.update(tune_blank_bias(model, decoder, enc, enc_lengths, target=target))
    info["decoder_mode"] = decoder.mode.value if decoder.mode else None
    return model, info
