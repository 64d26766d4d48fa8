"""Kokoro's acoustic side (F0/energy prediction + the decoder) replayed from CUDA graphs, one per (batch,
frames) bucket.

Why: the eager decoder is thousands of small kernel launches from Python (52 ms for one utterance on
the H200, run 17, where the GPU work is a few ms), and inside a process that also serves sockets and a
Parakeet batcher those launches wait for the GIL: run 25 measured a batch of 8 taking ~250 ms in the
engine process against 64 ms alone. A replayed graph is one launch.

How: ``KokoroModel.acoustic_pass`` has no host value in it once its lengths are a device tensor
(``Span.of_lens``, ``layers.masked_lstm``), so for a bucket (B, F) it is captured once over static input
buffers (B rows, F frames); a batch of b <= B items of f <= F frames is zero-padded into them (rows past b have length 0),
replayed, and its audio copied out before the next replay. Buckets: batches 1, 2, 4, ... up to
``max_batch`` and frames in steps of ``frame_step`` up to ``max_frames``, limited to ``max_cells``
batch x frames (memory grows with both). A batch no bucket holds whole is split into groups of rows that
each fit one (``split_rows``: longest rows first), replayed one after another; only a row longer than every
bucket runs eagerly. All graphs share one memory pool (one replay at a time, outputs copied out under a
lock), so the pool is about the largest bucket's activations.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from tts.kokoro.model import KokoroModel

log = logging.getLogger(__name__)


@dataclass
class _Bucket:
    batch: int
    frames: int
    en: torch.Tensor  # (B, C + S, F) text dtype: the aligned prosody features
    asr: torch.Tensor  # (B, C, F) decoder dtype
    s_pro: torch.Tensor  # (B, S) text dtype
    style: torch.Tensor  # (B, S) decoder dtype
    lens: torch.Tensor  # (B,) int64: frames per item, 0 for an unused row
    noise: torch.Tensor  # (B, F * samples_per_frame) work dtype
    graph: torch.cuda.CUDAGraph | None = None
    audio: torch.Tensor | None = None  # the captured output (B, T)


def bucket_sizes(max_batch: int, frame_step: int, max_frames: int, max_cells: int) -> list[tuple[int, int]]:
    """Every (batch, frames) bucket: batches 1, 2, 4... to ``max_batch``, frames ``frame_step`` apart up to
    ``max_frames``, batch x frames <= ``max_cells``."""
    batches, b = [], 1
    while b < max_batch:
        batches.append(b)
        b *= 2
    batches.append(max_batch)
    frames = list(range(frame_step, max_frames + 1, frame_step))
    return [(b, f) for b in batches for f in frames if b * f <= max_cells]


def split_rows(frames: list[int], buckets: list[tuple[int, int]]) -> tuple[list[list[int]], list[int]]:
    """The rows of a batch (``frames`` each) in groups that each fit one of ``buckets`` ((batch, frames) pairs),
    and the rows no bucket holds (run eagerly).

    Rows go longest first: each group starts at the longest row left and takes as many of the next (shorter)
    rows as the largest bucket holding that row's frames allows, so rows of similar length share a replay
    (less padding) and the fewest replays cover the batch. Run 64 (H100, 256 callers): batches of 40-64 past
    every bucket ran eagerly, ran out of Kokoro's memory share and were retried in halves, every tick.
    """
    order = sorted(range(len(frames)), key=lambda row: -frames[row])
    groups: list[list[int]] = []
    eager: list[int] = []
    i = 0
    while i < len(order):
        longest = frames[order[i]]
        room = max((b for b, f in buckets if f >= longest), default=0)
        if room == 0:
            eager.append(order[i])
            i += 1
            continue
        groups.append(order[i:i + room])
        i += room
    return groups, eager


class DecoderGraphs:
    """CUDA graphs of ``model.acoustic_pass`` per bucket (see the module docstring)."""

    def __init__(self, model: KokoroModel, max_batch: int = 64, frame_step: int = 32, max_frames: int = 512,
                 max_cells: int = 64 * 192):
        self.model = model
        self.device = model.device
        if self.device.type != "cuda":
            raise ValueError("decoder CUDA graphs need the model on a CUDA device")
        self.dtype = model.decoder_dtype
        self.text_dtype = model.bert_encoder.weight.dtype
        self.work = torch.promote_types(self.text_dtype, torch.float32)
        self.channels, self.style_dim = int(model.config["hidden_dim"]), model.style_dim
        self.spf = model.samples_per_frame
        self.sizes = bucket_sizes(max_batch, frame_step, max_frames, max_cells)
        self._buckets: dict[tuple[int, int], _Bucket] = {}
        self._pool = torch.cuda.graph_pool_handle()
        self._lock = threading.Lock()
        self.replays = 0
        self.fallbacks = 0  # batches with rows outside every bucket (run eagerly)
        self.split_batches = 0  # batches no bucket held whole, replayed in groups of rows
        self.capture_s = 0.0

    # ------------------------------------------------------------------ capture
    def _buffers(self, b: int, f: int) -> _Bucket:
        z = dict(device=self.device)
        c, s = self.channels, self.style_dim
        return _Bucket(b, f, torch.zeros(b, c + s, f, dtype=self.text_dtype, **z),
                       torch.zeros(b, c, f, dtype=self.dtype, **z), torch.zeros(b, s, dtype=self.text_dtype, **z),
                       torch.zeros(b, s, dtype=self.dtype, **z), torch.full((b,), f, dtype=torch.int64, **z),
                       torch.zeros(b, f * self.spf, dtype=self.work, **z))

    def _body(self, k: _Bucket) -> torch.Tensor:
        return self.model.acoustic_pass(k.en, k.asr, k.s_pro, k.style, k.lens, k.noise)

    @torch.inference_mode()
    def capture(self, b: int, f: int) -> None:
        """Warm the bucket's shapes up on a side stream (cuDNN and cuFFT plans, compiled kernels), then capture."""
        k = self._buffers(b, f)
        side = torch.cuda.Stream(self.device)
        side.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(side):
            for _ in range(2):
                self._body(k)
        torch.cuda.current_stream(self.device).wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self._pool, capture_error_mode="thread_local"):
            k.audio = self._body(k)
        k.graph = graph
        self._buckets[(b, f)] = k

    def capture_all(self) -> None:
        """Capture every bucket, largest first (the shared pool is sized by the first)."""
        t0 = time.perf_counter()
        with self._lock:
            for b, f in sorted(self.sizes, key=lambda s: -s[0] * s[1]):
                if (b, f) not in self._buckets:
                    self.capture(b, f)
        torch.cuda.synchronize(self.device)
        self.capture_s += time.perf_counter() - t0
        log.info("kokoro acoustic side: %d CUDA graphs captured in %.1f s", len(self._buckets), self.capture_s)

    @property
    def captured(self) -> int:
        return len(self._buckets)

    def split(self, frames: list[int]) -> tuple[list[list[int]], list[int]]:
        """``split_rows`` over the captured buckets."""
        return split_rows(frames, list(self._buckets))

    # ------------------------------------------------------------------ replay
    def pick(self, b: int, f: int) -> _Bucket | None:
        """The smallest captured bucket holding ``b`` items of ``f`` frames (None: none does)."""
        best = None
        for (bb, ff), k in self._buckets.items():
            if bb >= b and ff >= f and (best is None or bb * ff < best.batch * best.frames):
                best = k
        return best

    @torch.inference_mode()
    def run(self, en: torch.Tensor, asr: torch.Tensor, s_pro: torch.Tensor, style: torch.Tensor, lens: torch.Tensor,
            noise: torch.Tensor) -> torch.Tensor | None:
        """The audio (b, T) for the aligned features ``en`` (b, C + S, f) and ``asr`` (b, C, f) (``lens`` (b,)
        int64 frames per item, inputs zero past each item), from the bucket's graph; None when no bucket holds
        the batch (run it eagerly)."""
        b, f = asr.shape[0], asr.shape[-1]
        k = self.pick(b, f)
        if k is None:
            self.fallbacks += 1
            return None
        with self._lock:
            for dst, src in ((k.en, en), (k.asr, asr), (k.noise, noise)):
                dst.zero_()
                dst[:b, ..., : src.shape[-1]].copy_(src)
            k.s_pro[:b].copy_(s_pro)
            k.style[:b].copy_(style)
            k.lens.zero_()
            k.lens[:b].copy_(lens)
            assert k.graph is not None and k.audio is not None
            k.graph.replay()
            self.replays += 1
            # out of the shared pool before any other replay can write there
            return k.audio[:b, : (f * self.spf)].clone()
