"""The sliding histogram against numpy: percentiles, max/min, and the sliding window."""

from __future__ import annotations

import numpy as np
import pytest

from agent.metrics.histogram import SlidingHistogram

PRECISION = 0.01
QS = [0.0, 1.0, 5.0, 25.0, 50.0, 75.0, 90.0, 95.0, 99.0, 99.9, 100.0]


def _bounds(x: np.ndarray, q: float) -> tuple[float, float]:
    """numpy's linear interpolation uses the two order statistics around q*(n-1)."""
    lo = np.percentile(x, q, method="lower")
    hi = np.percentile(x, q, method="higher")
    return lo * (1 - PRECISION) - 1e-9, hi * (1 + PRECISION) + 1e-9


DISTRIBUTIONS = {
    "lognormal_latency_ms": lambda r: r.lognormal(mean=5.0, sigma=0.6, size=20000),
    "uniform": lambda r: r.uniform(0.5, 2000.0, size=5000),
    "bimodal": lambda r: np.concatenate([r.normal(80, 5, 9000), r.normal(900, 50, 1000)]).clip(0.1),
    "mostly_zero_lateness": lambda r: np.where(r.random(10000) < 0.97, 0.0, r.exponential(30.0, 10000)),
    "heavy_tail": lambda r: r.pareto(1.5, 20000) * 10 + 1,
    "tiny_n": lambda r: r.lognormal(3.0, 1.0, size=7),
}


@pytest.mark.parametrize("name", sorted(DISTRIBUTIONS))
def test_percentiles_match_numpy(name: str) -> None:
    x = DISTRIBUTIONS[name](np.random.default_rng(7))
    h = SlidingHistogram(window_s=60.0, precision=PRECISION, clock=lambda: 0.0)
    for v in x:
        h.record(float(v), now=1.0)
    got = h.percentiles(QS, now=1.0)
    for q, g in zip(QS, got, strict=True):
        ref = float(np.percentile(x, q))
        lo, hi = _bounds(x, q)
        assert g is not None and lo <= g <= hi, f"{name} p{q}: histogram {g} vs numpy {ref} (bounds {lo}..{hi})"
        assert abs(g - ref) <= PRECISION * max(abs(ref), 1e-9) + (hi - lo), name
    assert h.max(1.0) == pytest.approx(float(x.max()))
    assert h.min(1.0) == pytest.approx(float(x.min()))
    assert h.count(1.0) == len(x) == h.count_total
    assert h.sum_total == pytest.approx(float(x.sum()))


def test_p99_close_to_numpy_on_latency_like_data() -> None:
    """The number the budgets use: within half a bucket (~0.5 %) of numpy's p99."""
    x = np.random.default_rng(1).lognormal(mean=4.0, sigma=0.8, size=50000)
    h = SlidingHistogram(window_s=60.0, clock=lambda: 0.0)
    for v in x:
        h.record(float(v), now=0.0)
    for q in (50, 95, 99):
        assert h.percentile(q, now=0.0) == pytest.approx(np.percentile(x, q), rel=0.006)


def test_window_slides_and_forgets() -> None:
    h = SlidingHistogram(window_s=60.0, slices=6, clock=lambda: 0.0)
    old = np.full(1000, 1000.0)
    new = np.random.default_rng(3).uniform(10, 20, 1000)
    for v in old:
        h.record(float(v), now=5.0)
    for v in new:
        h.record(float(v), now=40.0)
    both = np.concatenate([old, new])
    assert h.percentile(99, now=41.0) == pytest.approx(np.percentile(both, 99), rel=0.01)
    # 60 s after the old samples' slice ended they are gone; the new ones remain.
    assert h.count(now=65.0) == 1000
    assert h.percentile(99, now=65.0) == pytest.approx(np.percentile(new, 99), rel=0.01)
    assert h.max(now=65.0) == pytest.approx(new.max())
    assert h.count(now=200.0) == 0
    assert h.percentile(50, now=200.0) is None and h.max(now=200.0) is None
    assert h.count_total == 2000  # lifetime count survives the window


def test_empty_and_single() -> None:
    h = SlidingHistogram(clock=lambda: 0.0)
    assert h.percentiles([50, 99]) == [None, None]
    h.record(-3.0)  # negative latencies (clock skew) count as zero
    h.record(42.0)
    assert h.percentile(0) == 0.0 and h.percentile(100) == 42.0
    assert h.snapshot()["count"] == 2
