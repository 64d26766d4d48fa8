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
batch x frames (memory grows with both). All graphs share one memory pool (one replay at a time, outputs
copied out under a lock), so the pool is about the largest bucket's activations.

Which replays run a batch (``plan = "cost"``, the default): each bucket's replay is timed once after capture,
and a batch's rows, longest first, are cut into the groups whose buckets' summed replay time is least
(``plan_rows``). A bucket is padded in rows (powers of two) and in frames (to its longest row), and a replay's
time grows with both: 33 clauses in the 64-row bucket cost what 64 do, and short clauses padded to a long one
cost what long ones do. ``plan = "fewest"``: one replay of the smallest bucket holding the whole batch, else
groups as large as the buckets allow (``split_rows``). Either way only a row longer than every bucket runs
eagerly.
"""

from __future__ import annotations

import logging
import math
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


def plan_rows(frames: list[int], costs: dict[tuple[int, int], float]) -> tuple[list[list[int]], list[int]]:
    """The rows of a batch (``frames`` each) in groups, each replayed from one bucket of ``costs`` ((batch, frames)
    -> the replay's time), such that the groups' summed bucket time is least; and the rows no bucket holds (run
    eagerly).

    A group's cost is that of the cheapest bucket with at least its rows and its longest row's frames; both grow
    with a group, so some least-cost cut is a run of consecutive rows in longest-first order (giving the group with
    the longest row that many of the longest rows, the next group the next ones, and so on keeps every group's
    size and never lengthens its longest row), and a dynamic program over the cut points finds it in O(rows^2).
    At equal cost the fewer replays win.
    """
    longest = max((f for _, f in costs), default=0)
    eager = [row for row, n in enumerate(frames) if n > longest]
    order = sorted((row for row, n in enumerate(frames) if n <= longest), key=lambda row: -frames[row])
    n = len(order)
    if n == 0:
        return [], eager
    sizes = sorted({b for b, _ in costs})
    # cheapest[f][c]: the least cost of a bucket holding c rows of up to f frames (inf when none), per distinct f
    cheapest: dict[int, list[float]] = {}
    for row in order:
        f = frames[row]
        if f in cheapest:
            continue
        per_size = {b: min((ms for (bb, ff), ms in costs.items() if bb == b and ff >= f), default=math.inf)
                    for b in sizes}
        table, best, k = [math.inf] * (n + 1), math.inf, len(sizes) - 1
        for c in range(n, 0, -1):  # the least over bucket sizes >= c, from the largest count down
            while k >= 0 and sizes[k] >= c:
                best = min(best, per_size[sizes[k]])
                k -= 1
            table[c] = best
        cheapest[f] = table
    total: list[tuple[float, int]] = [(0.0, 0)] + [(math.inf, 0)] * n  # (cost, replays) of the first i rows
    cut = [0] * (n + 1)
    for i in range(1, n + 1):
        for j in range(i):
            ms = cheapest[frames[order[j]]][i - j]
            if ms == math.inf:
                continue
            cand = (total[j][0] + ms, total[j][1] + 1)
            if cand < total[i]:
                total[i], cut[i] = cand, j
    groups: list[list[int]] = []
    i = n
    while i > 0:
        groups.append(order[cut[i]:i])
        i = cut[i]
    groups.reverse()
    return groups, eager


class DecoderGraphs:
    """CUDA graphs of ``model.acoustic_pass`` per bucket (see the module docstring)."""

    def __init__(self, model: KokoroModel, max_batch: int = 64, frame_step: int = 32, max_frames: int = 512,
                 max_cells: int = 64 * 192, plan: str = "cost"):
        if plan not in ("cost", "fewest"):
            raise ValueError(f"decoder graph plan {plan!r}: expected 'cost' or 'fewest'")
        self.model = model
        self.plan_mode = plan
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
        self.split_batches = 0  # batches replayed in more than one group of rows
        self.capture_s = 0.0
        self.replay_ms: dict[tuple[int, int], float] = {}  # per bucket, timed after capture (``time_replays``)

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
        if self.plan_mode == "cost":
            self.time_replays()

    @torch.inference_mode()
    def time_replays(self, repeats: int = 2) -> None:
        """Each bucket's replay time (the least of ``repeats``, ms), what ``plan`` weighs; logged per batch size
        at the shortest and longest frames."""
        t0 = time.perf_counter()
        with self._lock:
            for key, k in self._buckets.items():
                assert k.graph is not None
                best = math.inf
                for _ in range(repeats):
                    torch.cuda.synchronize(self.device)
                    start = time.perf_counter()
                    k.graph.replay()
                    torch.cuda.synchronize(self.device)
                    best = min(best, time.perf_counter() - start)
                self.replay_ms[key] = best * 1000.0
        rows = []
        for b in sorted({b for b, _ in self.replay_ms}):
            fs = sorted(f for bb, f in self.replay_ms if bb == b)
            rows.append(f"{b}x{fs[0]} {self.replay_ms[(b, fs[0])]:.1f}, {b}x{fs[-1]} {self.replay_ms[(b, fs[-1])]:.1f}")
        log.info("kokoro acoustic side: replays timed in %.1f s (ms): %s", time.perf_counter() - t0, "; ".join(rows))

    def cost(self, b: int, f: int) -> float:
        """A bucket's replay time as timed (ms); untimed, its cells (batch x frames)."""
        return self.replay_ms.get((b, f), float(b * f))

    def plan(self, frames: list[int]) -> tuple[list[list[int]], list[int]]:
        """The replay groups of a batch's rows (``frames`` each, padded as replayed) and the rows run eagerly: the
        least summed replay time (``plan_rows``), or with ``plan = "fewest"`` the whole batch in one replay when
        a bucket holds it, else ``split_rows``."""
        if self.plan_mode == "fewest":
            if frames and self.pick(len(frames), max(frames)) is not None:
                return [list(range(len(frames)))], []
            return split_rows(frames, list(self._buckets))
        return plan_rows(frames, {key: self.cost(*key) for key in self._buckets})

    @property
    def captured(self) -> int:
        return len(self._buckets)

    # ------------------------------------------------------------------ replay
    def pick(self, b: int, f: int) -> _Bucket | None:
        """The cheapest captured bucket (``cost``) holding ``b`` items of ``f`` frames (None: none does)."""
        best, best_cost = None, math.inf
        for (bb, ff), k in self._buckets.items():
            if bb >= b and ff >= f and self.cost(bb, ff) < best_cost:
                best, best_cost = k, self.cost(bb, ff)
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
