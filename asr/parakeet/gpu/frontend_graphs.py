"""Audio -> joint-projected encoder frames as one CUDA graph per shape profile (features + encoder).

Each profile owns static device buffers (audio, sample lengths, output) and a pinned host staging
buffer. A request is copied in (host->device without a sync when the audio is in pinned memory),
the graph replays, and the caller reads ``output[:batch, :frames]`` before the next replay of that
profile. Encoder lengths are computed on the host from the sample counts, so nothing waits on the
GPU to learn a shape.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import torch

from asr.parakeet.encoders.fast_conformer import encoder_frames
from asr.parakeet.encoders.shape_profiles import HOP, ShapeProfile, plan_batches

log = logging.getLogger(__name__)

FrontEnd = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]  # (audio, sample_lengths) -> encoded


def host_encoder_lengths(sample_lengths: np.ndarray) -> np.ndarray:
    """Valid encoder frames per clip, computed on the host (feature frames = samples // hop, then x8)."""
    frames = np.asarray(sample_lengths, dtype=np.int64) // HOP
    for _ in range(3):
        frames = np.where(frames > 0, (frames - 1) // 2 + 1, 0)
    return frames


@dataclass
class ProfileGraph:
    profile: ShapeProfile
    audio: torch.Tensor  # (B, samples) float32, device
    lengths: torch.Tensor  # (B,) int64, device
    staging: torch.Tensor  # (B, samples) float32, pinned host
    staging_lengths: torch.Tensor  # (B,) int64, pinned host
    output: torch.Tensor | None = None
    graph: torch.cuda.CUDAGraph | None = None
    copied: torch.cuda.Event | None = None  # the last host->device copy out of the staging buffers
    build_s: float = 0.0
    stats: dict[str, float] = field(default_factory=dict)


class GraphedFrontEnd:
    """Runs ``front_end(audio, lengths)`` per shape profile, replaying a captured CUDA graph when enabled."""

    def __init__(
        self,
        front_end: FrontEnd,
        profiles: list[ShapeProfile],
        device: torch.device | str = "cuda",
        use_graphs: bool = True,
        warmup_runs: int = 2,
    ) -> None:
        self.front_end = front_end
        self.profiles = profiles
        self.device = torch.device(device)
        self.use_graphs = use_graphs and self.device.type == "cuda"
        self.warmup_runs = warmup_runs
        self._built: dict[str, ProfileGraph] = {}
        self._stream = torch.cuda.Stream(self.device) if self.device.type == "cuda" else None

    def output_frames(self, profile: ShapeProfile) -> int:
        return encoder_frames(profile.frames)

    def build(self, profile: ShapeProfile) -> ProfileGraph:
        """Allocate, warm up (compiling if the front end is compiled) and capture one profile."""
        if profile.name in self._built:
            return self._built[profile.name]
        start = time.perf_counter()
        pin = self.device.type == "cuda"
        pg = ProfileGraph(
            profile=profile,
            audio=torch.zeros(profile.batch, profile.samples, device=self.device),
            lengths=torch.full((profile.batch,), profile.samples, dtype=torch.long, device=self.device),
            staging=torch.zeros(profile.batch, profile.samples, pin_memory=pin),
            staging_lengths=torch.zeros(profile.batch, dtype=torch.long, pin_memory=pin),
        )
        pg.audio.normal_(0, 0.1)  # warm up on non-trivial data
        with torch.inference_mode():
            if self.use_graphs:
                assert self._stream is not None
                self._stream.wait_stream(torch.cuda.current_stream(self.device))
                with torch.cuda.stream(self._stream):
                    for _ in range(self.warmup_runs):
                        self.front_end(pg.audio, pg.lengths)
                torch.cuda.current_stream(self.device).wait_stream(self._stream)
                torch.cuda.synchronize(self.device)
                pg.graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(pg.graph, stream=self._stream, capture_error_mode="thread_local"):
                    pg.output = self.front_end(pg.audio, pg.lengths)
            else:
                for _ in range(self.warmup_runs):
                    self.front_end(pg.audio, pg.lengths)
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        pg.build_s = time.perf_counter() - start
        log.info("encoder profile %s built in %.1f s", profile.spec(), pg.build_s)
        self._built[profile.name] = pg
        return pg

    def stage(self, pg: ProfileGraph, audio: torch.Tensor, sample_lengths: np.ndarray) -> None:
        """Host side of a request: copy host audio and lengths into this profile's pinned staging buffers.

        Blocks only until the profile's previous host->device copy has left the staging buffers.
        """
        b, n = audio.shape
        if pg.copied is not None:
            pg.copied.synchronize()
        if audio.device.type == "cpu":
            pg.staging[:b, :n].copy_(audio)
            pg.staging[:b, n:].zero_()
        pg.staging_lengths[:b] = torch.from_numpy(np.asarray(sample_lengths, dtype=np.int64))
        pg.staging_lengths[b:] = 0

    def launch(self, pg: ProfileGraph, audio: torch.Tensor) -> torch.Tensor:
        """Device side, on the current stream: copy in (from staging, or from ``audio`` on the device), replay.

        Returns the static output view (b, T_profile, D); call :meth:`stage` first.
        """
        b, n = audio.shape
        if audio.device.type == "cpu":
            pg.audio[:b].copy_(pg.staging[:b], non_blocking=True)
        else:
            pg.audio[:b, :n].copy_(audio)
            pg.audio[:b, n:].zero_()
        pg.lengths.copy_(pg.staging_lengths, non_blocking=True)
        if self.device.type == "cuda":
            pg.copied = pg.copied or torch.cuda.Event()
            pg.copied.record()
        if b < pg.profile.batch:
            pg.audio[b:].zero_()
        with torch.inference_mode():
            if pg.graph is not None:
                pg.graph.replay()
                assert pg.output is not None
                out = pg.output
            else:
                out = self.front_end(pg.audio, pg.lengths)
        return out[:b]

    def run_profile(self, pg: ProfileGraph, audio: torch.Tensor, sample_lengths: np.ndarray) -> torch.Tensor:
        """:meth:`stage` then :meth:`launch`: encode ``audio`` (b, n) in this profile."""
        self.stage(pg, audio, sample_lengths)
        return self.launch(pg, audio)

    def run(self, audio: torch.Tensor, sample_lengths: np.ndarray) -> list[tuple[torch.Tensor, np.ndarray]]:
        """Encode a batch, split over profiles as needed: ``[(encoded (b_i, T, D), enc_lengths (b_i,)), ...]``.

        Each encoded tensor is a view of a static buffer: consume it before the next run of its profile.
        """
        frames = int(audio.shape[1]) // HOP + 1
        pieces = []
        for profile, start, count in plan_batches(self.profiles, audio.shape[0], frames):
            pg = self.build(profile)
            lengths = np.asarray(sample_lengths[start : start + count])
            out = self.run_profile(pg, audio[start : start + count], lengths)
            pieces.append((out, host_encoder_lengths(lengths)))
        return pieces
