"""``GpuTranscriber``'s contract without CUDA: the same profiles, padding and encoder, run eagerly.

Each batch is split over profiles by ``plan_batches`` and padded to its profile's shape through
``GraphedFrontEnd`` (which replays nothing off CUDA), encoded by the same ``FastConformer`` and
decoded by the plain label-looping loop. It lets the fast backend's window -> profile mapping and
token -> word conversion run (and be tested) on a CPU; it is not faster than the general path.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np
import torch

from asr.parakeet.decoding.label_looping import DecodedSeq, LabelLoopingDecoder
from asr.parakeet.encoders.fast_conformer import FastConformer
from asr.parakeet.encoders.shape_profiles import HOP, ShapeProfile, plan_batches
from asr.parakeet.gpu.frontend_graphs import GraphedFrontEnd, host_encoder_lengths
from asr.parakeet.gpu.log_mel import LogMel


class ProfiledTranscriber:
    """``transcribe(batches)`` -> per-clip token sequences in input order, like ``GpuTranscriber``."""

    def __init__(self, model: Any, profiles: list[ShapeProfile], device: str | torch.device = "cpu",
                 dtype: torch.dtype = torch.float32) -> None:
        self.device = torch.device(device)
        self.profiles = profiles
        self.logmel = LogMel(n_mels=model.config.encoder_config.num_mel_bins).to(self.device)
        self.encoder = FastConformer(model.encoder, model.encoder_projector, dtype=dtype).to_device(self.device)
        self.frontend = GraphedFrontEnd(self._front_end, profiles, self.device, use_graphs=False, warmup_runs=0)
        self.decoder = LabelLoopingDecoder.from_model(model, device=self.device, dtype=dtype)

    def _front_end(self, audio: torch.Tensor, sample_lengths: torch.Tensor) -> torch.Tensor:
        return self.encoder(*self.logmel(audio, sample_lengths))

    def transcribe(self, batches: Iterable[tuple[torch.Tensor, np.ndarray]]) -> list[DecodedSeq]:
        results: list[DecodedSeq] = []
        for audio, sample_lengths in batches:
            frames = int(audio.shape[1]) // HOP + 1
            for profile, start, count in plan_batches(self.profiles, int(audio.shape[0]), frames):
                lengths = np.asarray(sample_lengths[start : start + count])
                pg = self.frontend.build(profile)
                self.frontend.stage(pg, audio[start : start + count], lengths)
                with torch.inference_mode():
                    encoded = self.frontend.launch(pg, audio[start : start + count])
                    seqs, _ = self.decoder.decode(encoded, host_encoder_lengths(lengths).tolist())
                results.extend(seqs)
        return results
