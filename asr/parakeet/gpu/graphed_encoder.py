"""The ``cuda_graphs`` encoder backend: FastConformer, compiled per shape profile, replayed as CUDA graphs.

Features in (the registry's contract), joint-projected frames out. Each profile owns static input
buffers and one captured graph; a request is copied in (padded with zero rows / frames), replayed,
and the valid part of the output copied out. On a CPU device it runs the same math without graphs.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from asr.parakeet.encoders.base import EncoderBackend, EncoderOutput, subsampled_lengths
from asr.parakeet.gpu.fast_encoder import FastConformer, encoder_frames
from asr.parakeet.gpu.profiles import DEFAULT_PROFILES, ShapeProfile, parse_profiles, plan_batches

log = logging.getLogger(__name__)


@dataclass
class _Captured:
    features: torch.Tensor  # (B, F, mels) float32
    lengths: torch.Tensor  # (B,) long
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
        if profiles is None or isinstance(profiles, str):
            profiles = parse_profiles(profiles or DEFAULT_PROFILES)
        self.profiles = list(profiles)
        self.mels = model.config.encoder_config.num_mel_bins
        self._captured: dict[str, _Captured] = {}
        self._longest = max(p.frames for p in self.profiles)
        self._warned: set[int] = set()

    def _capture(self, profile: ShapeProfile) -> _Captured:
        if profile.name in self._captured:
            return self._captured[profile.name]
        feats = torch.randn(profile.batch, profile.frames, self.mels, device=self.device)
        lengths = torch.full((profile.batch,), profile.frames, dtype=torch.long, device=self.device)
        stream = torch.cuda.Stream(self.device)
        stream.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(stream), torch.inference_mode():
            for _ in range(2):  # compile, autotune, lazy inits
                self.fast(feats, lengths)
        torch.cuda.current_stream(self.device).wait_stream(stream)
        torch.cuda.synchronize(self.device)
        graph = torch.cuda.CUDAGraph()
        with (
            torch.inference_mode(),
            torch.cuda.graph(graph, stream=stream, capture_error_mode="thread_local"),
        ):
            output = self.fast(feats, lengths)
        self._captured[profile.name] = _Captured(feats, lengths, output, graph)
        return self._captured[profile.name]

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
        if self.use_graphs:
            for profile in self.profiles:
                self._capture(profile)
