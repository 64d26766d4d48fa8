"""Parakeet-TDT on the profiled GPU encoder as an offline window engine (``--parakeet-backend fast``).

On CUDA the windows go to ``asr.parakeet.gpu.fast_transcriber.GpuTranscriber``: features + FastConformer
compiled and captured as one CUDA graph per shape profile, the graph decoder, encoder and decoder
pipelined on two streams. Each window goes to the shortest profile that holds it (a 10 s window
never pays for 30 s); the windows of one profile are padded to their longest and handed over as
one batch, which ``plan_batches`` splits over the profile's batch size. Tokens come back per
window and become words exactly as on the general path (``group_words`` on encoder frames).

Nothing CUDA-only is imported before ``load`` is asked for a CUDA device; on the CPU the same
mapping runs through ``ProfiledTranscriber`` (eager, for tests and toy runs).
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from asr import compile_cache
from asr.offline.parakeet_engine import offline_words
from asr.offline.plan import PlanOptions, plan_options
from asr.offline.results import Word
from asr.offline.window_engine import EngineSpec
from asr.parakeet.encoders.shape_profiles import HOP, ShapeProfile, parse_profiles, plan_batches
from asr.parakeet.encoders.shape_profiles import offline_profiles as default_profiles

if TYPE_CHECKING:
    import torch

    from asr.parakeet.decoding.label_looping import DecodedSeq

log = logging.getLogger(__name__)


class TokenTranscriber(Protocol):
    """What ``GpuTranscriber`` offers: padded batches in, one token sequence per clip out, in order."""

    profiles: list[ShapeProfile]

    def transcribe(self, batches: Iterable[tuple[torch.Tensor, np.ndarray]]) -> list[DecodedSeq]: ...


def profile_groups(lengths: Sequence[int], profiles: Sequence[ShapeProfile]) -> list[list[int]]:
    """Window indices grouped by the shortest profile (in frames) that holds each, shortest first.

    Inside a group the longest window comes first; a window longer than every profile is a ValueError.
    """
    classes = sorted({p.frames for p in profiles})
    groups: dict[int, list[int]] = {}
    for i, n in enumerate(lengths):
        frames = int(n) // HOP + 1
        fit = next((c for c in classes if c >= frames), None)
        if fit is None:
            raise ValueError(f"a window of {frames} feature frames exceeds every encoder profile (max {classes[-1]})")
        groups.setdefault(fit, []).append(i)
    return [sorted(groups[c], key=lambda i: -int(lengths[i])) for c in sorted(groups)]


def plan_cost(profiles: Sequence[ShapeProfile], replay_s: dict[tuple[int, int], float], count: int,
              samples: int) -> float | None:
    """Seconds of the replays that run ``count`` windows padded to ``samples`` (None: a replay not timed)."""
    frames = int(samples) // HOP + 1
    try:
        return sum(replay_s[(p.frames, p.batch)] for p, _, _ in plan_batches(list(profiles), count, frames))
    except (KeyError, ValueError):
        return None


def cheapest_groups(lengths: Sequence[int], groups: list[list[int]], profiles: Sequence[ShapeProfile],
                    replay_s: dict[tuple[int, int], float]) -> list[list[int]]:
    """``groups`` (one per length class), or all windows as one group padded to the longest when its replays
    cost less by the timed ``replay_s``; ``groups`` as they are when any replay is not timed."""
    if len(groups) < 2 or not replay_s:
        return groups
    split = [plan_cost(profiles, replay_s, len(g), max(int(lengths[i]) for i in g)) for g in groups]
    merged = plan_cost(profiles, replay_s, len(lengths), max(int(n) for n in lengths))
    if merged is None or any(c is None for c in split) or merged > sum(c for c in split if c is not None):
        return groups
    return [sorted(range(len(lengths)), key=lambda i: -int(lengths[i]))]


def padded_batch(clips: Sequence[np.ndarray]) -> tuple[torch.Tensor, np.ndarray]:
    """Clips as one zero-padded ``(b, longest)`` float32 tensor and their lengths."""
    import torch

    lengths = np.array([len(c) for c in clips], dtype=np.int64)
    audio = np.zeros((len(clips), int(lengths.max())), dtype=np.float32)
    for row, clip in zip(audio, clips, strict=True):
        row[: len(clip)] = clip
    return torch.from_numpy(audio), lengths


@dataclass
class _Launched:
    """A batch handed to the transcriber: its windows' profile groups, and the GPU call (``flight``) or, off
    CUDA, the sequences already computed."""

    windows: int
    groups: list[list[int]]
    flight: Any
    seqs: list[DecodedSeq] | None


class FastParakeetWindowEngine:
    languages = None  # v3 detects among its languages; v2 is English and ignores the hint

    def __init__(self, transcriber: TokenTranscriber, tokenizer: Any, frame_seconds: float, name: str,
                 max_batch: int, plan: PlanOptions, sample_rate: int = 16000) -> None:
        self.transcriber = transcriber
        self.tokenizer = tokenizer
        self.frame_seconds = frame_seconds
        self.name = name
        self.max_batch = max_batch
        self.plan = plan
        self.sample_rate = sample_rate
        self.replay_s: dict[tuple[int, int], float] = {}  # (frames, batch) -> measured seconds of one replay

    @classmethod
    def load(cls, spec: EngineSpec) -> FastParakeetWindowEngine:
        if not spec.model:
            raise ValueError("the parakeet engine needs --model: a checkpoint folder, .nemo file or Hub id")
        import torch

        from asr.parakeet.loading import load_parakeet, parse_dtype

        checkpoint = load_parakeet(spec.model, device="cpu", dtype=torch.float32)
        check_features(checkpoint.features)
        max_batch = spec.max_batch or (64 if spec.device.startswith("cuda") else 8)
        transcriber = make_transcriber(checkpoint.model, spec.profiles or default_profiles(max_batch), spec.device,
                                       parse_dtype(spec.dtype))
        base = spec.name or os.path.basename(os.path.normpath(spec.model)).removesuffix(".nemo") or "parakeet-tdt"
        engine = cls(transcriber, checkpoint.tokenizer, checkpoint.frame_seconds, base, max_batch,
                     plan_for(transcriber.profiles, spec.max_window_s, spec.overlap_s), checkpoint.features.sample_rate)
        engine.warmup(full=spec.device.startswith("cuda"))
        return engine

    def length_class(self, samples: int) -> int:
        """The frames of the shortest profile that holds a window of ``samples`` (the batcher groups by it:
        every profile runs at its whole batch, so a batch spanning two profiles costs two runs)."""
        frames = int(samples) // HOP + 1
        return next((p for p in sorted(x.frames for x in self.transcriber.profiles) if p >= frames), 1 << 30)

    def warmup(self, full: bool = True) -> None:
        """Build every profile (``full``: at its whole batch, so graphs and decoders exist before serving, then
        time its replay: ``batch_costs``)."""
        import torch

        for p in self.transcriber.profiles:
            t0 = time.perf_counter()
            b = p.batch if full else 1
            batch = [(torch.zeros(b, p.samples), np.full(b, p.samples))]
            self.transcriber.transcribe(batch)
            built = time.perf_counter() - t0
            if full:
                self.replay_s[(p.frames, p.batch)] = min(_timed(self.transcriber.transcribe, batch) for _ in range(3))
            log.info("parakeet fast: profile %s ready in %.1f s (replay %.1f ms)", p.spec(), built,
                     1000 * self.replay_s.get((p.frames, p.batch), float("nan")))
        compile_cache.save("parakeet-fast")

    def batch_costs(self, length_class: int) -> list[tuple[int, float]]:
        """(batch, seconds) of one replay of each profile of ``length_class`` as measured at warm-up (the
        window batcher sizes its batches by them); empty before a full warm-up."""
        return sorted((b, s) for (f, b), s in self.replay_s.items() if f == length_class)

    @property
    def pipelined(self) -> bool:
        """Whether ``launch_windows`` returns before the GPU is done (the CUDA transcriber)."""
        return hasattr(self.transcriber, "submit")

    def transcribe_windows(self, windows: list[np.ndarray], language: str | None) -> list[list[Word]]:
        return self.finish_windows(self.launch_windows(windows, language))

    def launch_windows(self, windows: list[np.ndarray], language: str | None) -> _Launched:
        """Enqueue a batch (on CUDA, without waiting for the GPU); ``finish_windows`` gives its words."""
        lengths = [len(w) for w in windows]
        groups = profile_groups(lengths, self.transcriber.profiles) if windows else []
        # a batch the window batcher filled with shorter windows runs as one replay of its longest class
        groups = cheapest_groups(lengths, groups, self.transcriber.profiles, self.replay_s)
        batches = (padded_batch([windows[i] for i in g]) for g in groups)
        submit = getattr(self.transcriber, "submit", None)
        if submit is not None:
            return _Launched(len(windows), groups, submit(batches), None)
        return _Launched(len(windows), groups, None, self.transcriber.transcribe(batches))

    def wait_encoded(self, launched: _Launched) -> None:
        """Block until only the batch's decoding is left on the GPU (the time to hand over the next one)."""
        if launched.flight is not None:
            launched.flight.wait_encoded()

    def finish_windows(self, launched: _Launched) -> list[list[Word]]:
        seqs = self.transcriber.result(launched.flight) if launched.flight is not None else launched.seqs or []
        order = [i for g in launched.groups for i in g]
        words: list[list[Word]] = [[] for _ in range(launched.windows)]
        for i, seq in zip(order, seqs, strict=True):
            words[i] = self.words(seq)
        return words

    def words(self, seq: DecodedSeq) -> list[Word]:
        """Window-relative words of one token sequence, as ``ParakeetEngine.result`` groups them."""
        from asr.parakeet.tokenizer import group_words

        return offline_words(group_words(self.tokenizer, seq.tokens, seq.frames, seq.durations, self.frame_seconds))


def _timed(fn: Any, *args: Any) -> float:
    t0 = time.perf_counter()
    fn(*args)
    return time.perf_counter() - t0


def plan_for(profiles: Sequence[ShapeProfile], max_window_s: float = 0.0, overlap_s: float | None = None,
             rate: int = 16000) -> PlanOptions:
    """Plan options whose windows fit the longest profile (30 s by default, shorter if it is)."""
    longest = max(p.samples for p in profiles) / rate
    window = min(max_window_s or 30.0, longest)
    try:
        return plan_options(window, overlap_s)
    except ValueError:
        raise ValueError(f"the longest encoder profile holds {longest:.1f} s; offline windows need more than "
                         f"{2 * PlanOptions.overlap_s + PlanOptions.search_s:g} s") from None


def check_features(features: Any) -> None:
    """The profiled front end computes NeMo's default log-mel (hop 160 at 16 kHz, per-feature norm) only."""
    from asr.parakeet.features import FeatureConfig

    want = FeatureConfig(n_mels=features.n_mels, n_fft=features.n_fft, win_length=features.win_length,
                         preemphasis=features.preemphasis)
    if features != want:
        raise ValueError(f"the fast parakeet backend needs 16 kHz, hop 160, per-feature normalized features; "
                         f"this checkpoint has {features}: use --parakeet-backend general")


def make_transcriber(model: Any, profiles: str, device: str, dtype: Any) -> TokenTranscriber:
    """``GpuTranscriber`` on CUDA (compiled, graphed); ``ProfiledTranscriber`` (eager) elsewhere."""
    shapes = parse_profiles(profiles)
    if device.startswith("cuda"):
        from asr.parakeet.gpu.fast_transcriber import GpuTranscriber

        return GpuTranscriber(model, shapes, device=device, dtype=dtype)
    from asr.offline.profiled_cpu import ProfiledTranscriber

    return ProfiledTranscriber(model, shapes, device=device, dtype=dtype)
