"""The ``cuda_graphs`` encoder backend: FastConformer, compiled per shape profile, replayed as CUDA graphs.

Features in (the registry's contract), joint-projected frames out. Each profile owns static input
buffers and one captured graph; a request is copied in (padded with zero rows / frames), replayed,
and the valid part of the output copied out. On a CPU device it runs the same math without graphs.

With :meth:`GraphedEncoder.attach_features` (the engine does it on CUDA) the log-mel features are
captured in the same graph: audio in, frames out, :meth:`encode_audio`. A streaming tick then costs
two copies and one replay instead of ~20 feature kernels launched one by one from Python, each of
which gave the GIL away to the event loop (1.3-1.8 ms per tick at 512 callers on the H200).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from asr import compile_cache
from asr.parakeet.encoders.base import EncoderBackend, EncoderOutput, subsampled_lengths
from asr.parakeet.encoders.fast_conformer import FastConformer, encoder_frames
from asr.parakeet.encoders.shape_profiles import DEFAULT_PROFILES, ShapeProfile, as_profiles, plan_batches

log = logging.getLogger(__name__)


@dataclass
class _Captured:
    features: torch.Tensor  # (B, F, mels) float32
    lengths: torch.Tensor  # (B,) long
    output: torch.Tensor
    graph: torch.cuda.CUDAGraph


@dataclass
class _AudioCaptured:
    audio: torch.Tensor  # (B, samples) float32; stale past each row's length (the features mask it)
    lengths: torch.Tensor  # (B,) long samples
    output: torch.Tensor
    graph: torch.cuda.CUDAGraph


class GraphedEncoder(EncoderBackend):
    name = "cuda_graphs"

    def __init__(
        self,
        model: torch.nn.Module,
        device: torch.device | str = "cuda",
        dtype: torch.dtype | None = None,
        profiles: Sequence[ShapeProfile] | str | None = None,
        compile: bool = True,
    ) -> None:
        super().__init__(model, device, dtype or torch.bfloat16)
        self.fast = FastConformer(model.encoder, model.encoder_projector, dtype=self.dtype).to_device(
            self.device
        )
        self.use_graphs = self.device.type == "cuda"
        if compile and self.use_graphs:
            self.fast.compile_layers(dynamic=False)
        profiles = as_profiles(profiles, DEFAULT_PROFILES)
        self.profiles = list(profiles)
        self.mels = model.config.encoder_config.num_mel_bins
        self._captured: dict[str, _Captured] = {}
        self._longest = max(p.frames for p in self.profiles)
        self._warned: set[int] = set()
        self.features: torch.nn.Module | None = None  # log-mel captured with the encoder (attach_features)
        self._captured_audio: dict[str, _AudioCaptured] = {}

    def _warm_and_capture(self, run: Callable[[], torch.Tensor]) -> tuple[torch.Tensor, torch.cuda.CUDAGraph]:
        """Run ``run`` twice on a side stream (compile, autotune, cuFFT plans, lazy inits), then capture it."""
        stream = torch.cuda.Stream(self.device)
        stream.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(stream), torch.inference_mode():
            for _ in range(2):
                run()
        torch.cuda.current_stream(self.device).wait_stream(stream)
        torch.cuda.synchronize(self.device)
        graph = torch.cuda.CUDAGraph()
        with (
            torch.inference_mode(),
            torch.cuda.graph(graph, stream=stream, capture_error_mode="thread_local"),
        ):
            output = run()
        return output, graph

    def _capture(self, profile: ShapeProfile) -> _Captured:
        if profile.name in self._captured:
            return self._captured[profile.name]
        feats = torch.randn(profile.batch, profile.frames, self.mels, device=self.device)
        lengths = torch.full((profile.batch,), profile.frames, dtype=torch.long, device=self.device)
        output, graph = self._warm_and_capture(lambda: self.fast(feats, lengths))
        self._captured[profile.name] = _Captured(feats, lengths, output, graph)
        return self._captured[profile.name]

    def attach_features(self, features: torch.nn.Module) -> None:
        """Capture ``features`` (``asr.parakeet.features.LogMelFeatures``) with the encoder: see encode_audio."""
        self.features = features
        self._captured_audio.clear()

    def _capture_audio(self, profile: ShapeProfile) -> _AudioCaptured:
        if profile.name in self._captured_audio:
            return self._captured_audio[profile.name]
        assert self.features is not None
        samples = (profile.frames - 1) * self.features.config.hop_length  # centred STFT: exactly profile.frames
        audio = torch.randn(profile.batch, samples, device=self.device) * 0.1
        lengths = torch.full((profile.batch,), samples, dtype=torch.long, device=self.device)

        def run() -> torch.Tensor:
            feats, frames = self.features(audio, lengths)
            return self.fast(feats, frames)

        output, graph = self._warm_and_capture(run)
        self._captured_audio[profile.name] = _AudioCaptured(audio, lengths, output, graph)
        return self._captured_audio[profile.name]

    @torch.inference_mode()
    def encode_audio(self, audio: torch.Tensor, lengths: torch.Tensor) -> EncoderOutput:
        """Padded audio ``[B, N]`` and sample lengths ``[B]`` -> frames: features + encoder, one replay per piece.

        Rows past their length are never cleared: the features mask every sample at or past a row's
        length, so stale audio in the static buffer cannot reach the output.
        """
        if self.features is None:
            raise RuntimeError("encode_audio needs attach_features() first")
        audio = audio.to(self.device, torch.float32)
        lengths = lengths.to(self.device).long()
        b, n = audio.shape
        f = n // self.features.config.hop_length + 1  # centred STFT frames of the batch width
        if not self.use_graphs or f > self._longest:
            feats, frames = self.features(audio, lengths)
            return self.encode(feats, frames)
        out_lengths = subsampled_lengths(self.model, self.features.frame_lengths(lengths))
        frames = encoder_frames(f)
        parts = []
        for profile, start, count in plan_batches(self.profiles, b, f):
            cap = self._capture_audio(profile)
            cap.audio[:count, :n].copy_(audio[start : start + count])
            cap.lengths[:count].copy_(lengths[start : start + count])
            cap.lengths[count:].zero_()
            cap.graph.replay()
            parts.append(cap.output[:count, :frames].clone())
        return EncoderOutput(parts[0] if len(parts) == 1 else torch.cat(parts), out_lengths)

    @torch.inference_mode()
    def encode(self, features: torch.Tensor, lengths: torch.Tensor) -> EncoderOutput:
        features = features.to(self.device, torch.float32)
        lengths = lengths.to(self.device).long()
        out_lengths = subsampled_lengths(self.model, lengths)
        if not self.use_graphs:
            return EncoderOutput(self.fast(features, lengths), out_lengths)
        b, f, _ = features.shape
        if f > self._longest:  # e.g. a streaming session many chunks behind: slower, never an error
            if f not in self._warned:
                self._warned.add(f)
                log.warning("cuda_graphs encoder: %d feature frames exceed every profile (max %d); running "
                            "eagerly (add a longer profile if this is not a rare overload)", f, self._longest)
            return EncoderOutput(self.fast(features, lengths, eager=True), out_lengths)
        frames = encoder_frames(f)
        parts = []
        for profile, start, count in plan_batches(self.profiles, b, f):
            cap = self._capture(profile)
            cap.features[:count, :f].copy_(features[start : start + count])
            cap.features[:count, f:].zero_()
            cap.features[count:].zero_()
            cap.lengths[:count].copy_(lengths[start : start + count])
            cap.lengths[count:].zero_()
            cap.graph.replay()
            parts.append(cap.output[:count, :frames].clone())
        return EncoderOutput(parts[0] if len(parts) == 1 else torch.cat(parts), out_lengths)

    def warmup(self) -> None:
        """Capture every profile: audio-in graphs when features are attached, else features-in graphs."""
        if self.use_graphs:
            for profile in self.profiles:
                if self.features is not None:
                    self._capture_audio(profile)
                else:
                    self._capture(profile)
            compile_cache.save("encoder-graphs")
