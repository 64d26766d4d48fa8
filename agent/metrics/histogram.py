"""A streaming histogram over a sliding time window, with bounded relative error.

Values fall into log-spaced buckets (relative width ``precision``), so memory is fixed no
matter the rate, recording is O(1) with no allocation beyond an int, and a percentile is
exact to within half a bucket (about ``precision / 2`` relative). The window is a ring of
``slices`` sub-windows: a query merges the live ones, so the window covers between
``window_s * (slices - 1) / slices`` and ``window_s`` seconds of the most recent samples.
Exact min, max, lifetime count and sum are kept as well.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence

import numpy as np


class SlidingHistogram:
    """p50/p95/p99/max of recent samples; ``precision`` is the bucket's relative width."""

    def __init__(
        self,
        window_s: float = 60.0,
        slices: int = 6,
        *,
        lowest: float = 0.01,
        highest: float = 1e7,
        precision: float = 0.01,
        clock: Callable[[], float] = time.monotonic,
    ):
        if window_s <= 0 or slices < 1:
            raise ValueError("window_s must be > 0 and slices >= 1")
        if not 0 < lowest < highest or precision <= 0:
            raise ValueError("need 0 < lowest < highest and precision > 0")
        self.window_s = float(window_s)
        self.slices = int(slices)
        self._slice_s = self.window_s / self.slices
        self._clock = clock
        self._lowest = float(lowest)
        self._log_base = math.log1p(precision)
        # Bucket 0 holds everything <= lowest (zeros included); bucket i >= 1 holds
        # (lowest * g^(i-1), lowest * g^i], with g = 1 + precision.
        self._nbuckets = 2 + int(math.ceil(math.log(highest / lowest) / self._log_base))
        edges = lowest * np.exp(self._log_base * np.arange(self._nbuckets))
        mids = np.empty(self._nbuckets)
        mids[0] = 0.0
        mids[1:] = np.sqrt(edges[:-1] * edges[1:])  # geometric centre of each bucket
        self._mids = mids
        self._counts = np.zeros((self.slices, self._nbuckets), dtype=np.int64)
        self._max = np.full(self.slices, -math.inf)
        self._min = np.full(self.slices, math.inf)
        self._epoch = int(self._clock() // self._slice_s)
        self.count_total = 0
        self.sum_total = 0.0

    # -- recording ---------------------------------------------------------------------

    def _bucket(self, value: float) -> int:
        if value <= self._lowest:
            return 0
        i = 1 + int(math.log(value / self._lowest) / self._log_base)
        return i if i < self._nbuckets else self._nbuckets - 1

    def _advance(self, now: float) -> int:
        epoch = int(now // self._slice_s)
        gap = epoch - self._epoch
        if gap > 0:
            for e in range(self._epoch + 1, self._epoch + 1 + min(gap, self.slices)):
                s = e % self.slices
                self._counts[s].fill(0)
                self._max[s] = -math.inf
                self._min[s] = math.inf
            self._epoch = epoch
        return self._epoch % self.slices

    def record(self, value: float, now: float | None = None) -> None:
        """Add one sample (negative values count as 0)."""
        v = value if value > 0.0 else 0.0
        s = self._advance(self._clock() if now is None else now)
        self._counts[s, self._bucket(v)] += 1
        if v > self._max[s]:
            self._max[s] = v
        if v < self._min[s]:
            self._min[s] = v
        self.count_total += 1
        self.sum_total += v

    def clear(self) -> None:
        """Forget the window (lifetime count and sum are kept)."""
        self._counts.fill(0)
        self._max.fill(-math.inf)
        self._min.fill(math.inf)

    # -- queries -----------------------------------------------------------------------

    def _merged(self, now: float | None) -> np.ndarray:
        self._advance(self._clock() if now is None else now)
        return self._counts.sum(axis=0)

    def count(self, now: float | None = None) -> int:
        return int(self._merged(now).sum())

    def max(self, now: float | None = None) -> float | None:
        self._advance(self._clock() if now is None else now)
        m = float(self._max.max())
        return None if m == -math.inf else m

    def min(self, now: float | None = None) -> float | None:
        self._advance(self._clock() if now is None else now)
        m = float(self._min.min())
        return None if m == math.inf else m

    def percentiles(self, qs: Sequence[float], now: float | None = None) -> list[float | None]:
        """Percentiles (0-100) over the window, interpolated like ``numpy.percentile``."""
        counts = self._merged(now)
        n = int(counts.sum())
        if n == 0:
            return [None for _ in qs]
        cum = np.cumsum(counts)
        hi, lo = float(self._max.max()), float(self._min.min())
        out: list[float | None] = []
        for q in qs:
            pos = (min(max(q, 0.0), 100.0) / 100.0) * (n - 1)
            below = int(math.floor(pos))
            frac = pos - below
            a = self._order_stat(cum, below, lo, hi, n)
            b = self._order_stat(cum, min(below + 1, n - 1), lo, hi, n) if frac > 0 else a
            out.append(a + (b - a) * frac)
        return out

    def _order_stat(self, cum: np.ndarray, rank: int, lo: float, hi: float, n: int) -> float:
        """The value of the ``rank``-th smallest sample (0-based), to bucket precision."""
        if rank == 0:
            return lo
        if rank == n - 1:
            return hi
        bucket = int(np.searchsorted(cum, rank + 1))
        return float(min(max(self._mids[bucket], lo), hi))

    def percentile(self, q: float, now: float | None = None) -> float | None:
        return self.percentiles([q], now)[0]

    def snapshot(self, now: float | None = None) -> dict[str, float | None]:
        """count, p50, p95, p99, max, min over the window (None when empty)."""
        p50, p95, p99, p1 = self.percentiles([50, 95, 99, 1], now)
        return {"count": float(self.count(now)), "p50": p50, "p95": p95, "p99": p99, "p1": p1,
                "max": self.max(now), "min": self.min(now)}
