"""What Kokoro's two CUDA graph sets share (``decoder_graphs``, ``text_graphs``): the (batch, length) buckets,
each bucket's replay timed after capture, and the plan that cuts a batch's rows into replays.

A bucket pads its rows to a power-of-two batch and to its length, and a replay costs what the padded bucket
costs: in one replay of the smallest bucket holding it, 33 clauses cost what 64 do and short clauses what the
longest does. ``plan_rows`` cuts a batch, longest rows first, into the groups whose buckets' summed replay time
is least; ``split_rows`` (the ``"fewest"`` plan, before run 70) makes the groups as large as the buckets allow.
"""

from __future__ import annotations

import bisect
import logging
import math
import threading
import time
from collections.abc import Callable
from typing import Any

import torch

log = logging.getLogger(__name__)
PLANS = ("cost", "fewest")


def bucket_sizes(max_batch: int, step: int, max_length: int, max_cells: int) -> list[tuple[int, int]]:
    """Every (batch, length) bucket: batches 1, 2, 4... to ``max_batch``, lengths ``step`` apart up to
    ``max_length``, batch x length <= ``max_cells``."""
    batches, b = [], 1
    while b < max_batch:
        batches.append(b)
        b *= 2
    batches.append(max_batch)
    lengths = list(range(step, max_length + 1, step))
    return [(b, n) for b in batches for n in lengths if b * n <= max_cells]


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


class CostTable:
    """The least replay cost of ``c`` rows of at most ``n`` each (the cheapest bucket holding them), from a
    (batch, length) -> cost map, tabulated once: a batch's plan then reads it instead of scanning every bucket
    for every row (the plan runs on every Kokoro tick, in the engine's Python thread)."""

    def __init__(self, costs: dict[tuple[int, int], float]) -> None:
        self.lengths = sorted({n for _, n in costs})
        self.max_rows = max((b for b, _ in costs), default=0)
        self._tables: list[list[float]] = [[]] * len(self.lengths)
        best_per_size: dict[int, float] = {}
        for li in range(len(self.lengths) - 1, -1, -1):  # longest first: a bucket of length >= L holds rows of L
            for (b, n), ms in costs.items():
                if n == self.lengths[li]:
                    best_per_size[b] = min(best_per_size.get(b, math.inf), ms)
            table, best = [math.inf] * (self.max_rows + 1), math.inf
            for c in range(self.max_rows, 0, -1):  # the least over bucket sizes >= c
                best = min(best, best_per_size.get(c, math.inf))
                table[c] = best
            self._tables[li] = table

    @property
    def longest(self) -> int:
        return self.lengths[-1] if self.lengths else 0

    def rows(self, n: int) -> list[float]:
        """Per row count c (index), the least cost of c rows of at most ``n`` (inf: no bucket holds them)."""
        return self._tables[bisect.bisect_left(self.lengths, n)]


def plan_rows(frames: list[int], costs: dict[tuple[int, int], float] | CostTable
              ) -> tuple[list[list[int]], list[int]]:
    """The rows of a batch (``frames`` each) in groups, each replayed from one bucket of ``costs`` ((batch, frames)
    -> the replay's time, or their ``CostTable``), such that the groups' summed bucket time is least; and the rows
    no bucket holds (run eagerly).

    A group's cost is that of the cheapest bucket with at least its rows and its longest row's frames; both grow
    with a group, so some least-cost cut is a run of consecutive rows in longest-first order (giving the group with
    the longest row that many of the longest rows, the next group the next ones, and so on keeps every group's
    size and never lengthens its longest row), and a dynamic program over the cut points finds it in O(rows^2).
    At equal cost the fewer replays win.
    """
    table = costs if isinstance(costs, CostTable) else CostTable(costs)
    eager = [row for row, n in enumerate(frames) if n > table.longest]
    order = sorted((row for row, n in enumerate(frames) if n <= table.longest), key=lambda row: -frames[row])
    n = len(order)
    if n == 0:
        return [], eager
    starts = [table.rows(frames[row]) for row in order]  # a group starting at row j is sized by row j's frames
    total: list[tuple[float, int]] = [(0.0, 0)] + [(math.inf, 0)] * n  # (cost, replays) of the first i rows
    cut = [0] * (n + 1)
    for i in range(1, n + 1):
        for j in range(max(0, i - table.max_rows), i):
            ms = starts[j][i - j]
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


class TimedBuckets:
    """A graph set's buckets (``self._buckets``: (batch, length) -> an object with ``graph``), how they are captured,
    their replay times and the plan over them. The set sets ``side`` (for its log line) and ``sizes``, calls
    ``init_graphs``, and implements ``capture(b, n)`` with ``capture_graph``; ``capture_all`` captures every size and,
    with the ``"cost"`` plan, times the replays."""

    side = ""
    sizes: list[tuple[int, int]]
    _buckets: dict[tuple[int, int], Any]

    def init_graphs(self, device: torch.device, plan: str) -> None:
        """The set's state: its buckets, one memory pool, its own capture stream, the replay lock and counters."""
        self.init_plan(plan)
        if device.type != "cuda":
            raise ValueError(f"kokoro {self.side}-side CUDA graphs need the model on a CUDA device")
        self.device = device
        self._buckets = {}
        self._pool = torch.cuda.graph_pool_handle()
        # Captured on a stream of this set's own: cuBLAS's workspace is cached per (handle, stream) and baked into
        # the captured GEMMs (pytorch#193402), so two sets captured on torch's one default capture stream share it,
        # and replaying them at once from two threads (the first-clause lane beside the main lane) hung the GPU.
        self._capture_stream = torch.cuda.Stream(device)
        self._lock = threading.Lock()  # one replay at a time: the buckets share the pool
        self.replays = 0
        self.fallbacks = 0  # batches with rows outside every bucket (run eagerly)
        self.split_batches = 0  # batches replayed in more than one group of rows
        self.capture_s = 0.0

    def init_plan(self, plan: str) -> None:
        """The plan's state: which plan, the replay times, the cost table built from them."""
        if plan not in PLANS:
            raise ValueError(f"kokoro graph plan {plan!r}: expected one of {PLANS}")
        self.plan_mode = plan
        self.replay_ms: dict[tuple[int, int], float] = {}  # per bucket, timed after capture
        self._table: CostTable | None = None  # ``cost`` of every bucket, tabulated for ``plan``
        self._table_of: tuple[int, int] = (-1, -1)  # (buckets, timed buckets) the table was built from

    @torch.inference_mode()
    def capture_graph(self, body: Callable[[], Any]) -> tuple[torch.cuda.CUDAGraph, Any]:
        """``body`` warmed up twice on a side stream (cuDNN and cuFFT plans, the LSTM copies), then captured on the
        set's stream into its pool: the graph and the captured output."""
        warm = torch.cuda.Stream(self.device)
        warm.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(warm):
            for _ in range(2):
                body()
        torch.cuda.current_stream(self.device).wait_stream(warm)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self._pool, stream=self._capture_stream, capture_error_mode="thread_local"):
            out = body()
        return graph, out

    def capture(self, b: int, n: int) -> None:
        raise NotImplementedError

    def capture_all(self) -> None:
        """Capture every bucket, largest first (the shared pool is sized by the first), then time the replays."""
        t0 = time.perf_counter()
        with self._lock:
            for b, n in sorted(self.sizes, key=lambda s: -s[0] * s[1]):
                if (b, n) not in self._buckets:
                    self.capture(b, n)
        torch.cuda.synchronize(self.device)
        self.capture_s += time.perf_counter() - t0
        log.info("kokoro %s side: %d CUDA graphs captured in %.1f s", self.side, len(self._buckets), self.capture_s)
        if self.plan_mode == "cost":
            self.time_replays()

    @property
    def captured(self) -> int:
        return len(self._buckets)

    @torch.inference_mode()
    def time_replays(self, repeats: int = 2) -> None:
        """Each bucket's replay time (the least of ``repeats``, ms), what ``plan`` weighs; logged per batch size at
        the shortest and longest lengths."""
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
            ns = sorted(n for bb, n in self.replay_ms if bb == b)
            rows.append(f"{b}x{ns[0]} {self.replay_ms[(b, ns[0])]:.1f}, {b}x{ns[-1]} {self.replay_ms[(b, ns[-1])]:.1f}")
        log.info("kokoro %s side: replays timed in %.1f s (ms): %s", self.side, time.perf_counter() - t0,
                 "; ".join(rows))

    def cost(self, b: int, n: int) -> float:
        """A bucket's replay time as timed (ms); untimed, its cells (batch x length)."""
        return self.replay_ms.get((b, n), float(b * n))

    def plan(self, lengths: list[int]) -> tuple[list[list[int]], list[int]]:
        """The replay groups of a batch's rows (``lengths`` each, padded as replayed) and the rows run eagerly: the
        least summed replay time (``plan_rows``), or with ``"fewest"`` the whole batch in one replay when a
        bucket holds it, else ``split_rows``."""
        if self.plan_mode == "fewest":
            if lengths and self.pick(len(lengths), max(lengths)) is not None:
                return [list(range(len(lengths)))], []
            return split_rows(lengths, list(self._buckets))
        built_from = (len(self._buckets), len(self.replay_ms))  # a capture or a timing since: tabulate again
        if self._table is None or self._table_of != built_from:
            self._table, self._table_of = CostTable({key: self.cost(*key) for key in self._buckets}), built_from
        return plan_rows(lengths, self._table)

    def pick(self, b: int, n: int) -> Any:
        """The cheapest captured bucket (``cost``) holding ``b`` rows of ``n`` (None: none does)."""
        best, best_cost = None, math.inf
        for (bb, nn), k in self._buckets.items():
            if bb >= b and nn >= n and self.cost(bb, nn) < best_cost:
                best, best_cost = k, self.cost(bb, nn)
        return best
