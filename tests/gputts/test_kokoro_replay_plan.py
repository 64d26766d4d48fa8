"""The replay plan of Kokoro's decoder graphs (``plan_rows``): the least summed bucket time over every way of
grouping a batch's rows, checked against brute force, and the cases it exists for."""

from __future__ import annotations

import itertools
import math
import random

import pytest

pytest.importorskip("torch")

from tts.kokoro.graph_buckets import plan_rows  # noqa: E402


def _bucket_cost(rows: list[int], frames: list[int], costs: dict[tuple[int, int], float]) -> float:
    longest = max(frames[r] for r in rows)
    return min((ms for (b, f), ms in costs.items() if b >= len(rows) and f >= longest), default=math.inf)


def _partitions(items: list[int]):
    """Every set partition of ``items``."""
    if not items:
        yield []
        return
    first, rest = items[0], items[1:]
    for part in _partitions(rest):
        for i in range(len(part)):
            yield part[:i] + [[first, *part[i]]] + part[i + 1:]
        yield [[first], *part]


def _check_cover(groups: list[list[int]], eager: list[int], n: int) -> None:
    assert sorted(itertools.chain(eager, *groups)) == list(range(n))


def test_the_plan_is_the_least_cost_grouping_brute_force() -> None:
    rng = random.Random(7)
    for _ in range(300):
        sizes = sorted(rng.sample([1, 2, 3, 4, 6, 8], rng.randint(1, 4)))
        lengths = sorted(rng.sample([32, 64, 96, 128], rng.randint(1, 3)))
        # a replay's time grows with rows and frames: a fixed part plus a part per cell, with noise kept monotone
        fixed, per_cell = rng.uniform(0, 30), rng.uniform(0.01, 0.2)
        costs = {(b, f): fixed + per_cell * b * f * (1 + 0.1 * i) for i, (b, f) in
                 enumerate(sorted(itertools.product(sizes, lengths), key=lambda k: (k[0] * k[1], k)))}
        n = rng.randint(1, 6)
        frames = [rng.randint(1, lengths[-1] + 20) for _ in range(n)]
        groups, eager = plan_rows(frames, costs)
        _check_cover(groups, eager, n)
        assert eager == [r for r in range(n) if frames[r] > lengths[-1]]
        got = sum(_bucket_cost(g, frames, costs) for g in groups)
        assert got < math.inf
        rows = [r for r in range(n) if r not in eager]
        best = min(sum(_bucket_cost(g, frames, costs) for g in part) for part in _partitions(rows))
        assert got == pytest.approx(best, rel=1e-12, abs=1e-9)


def test_33_rows_run_as_32_plus_1_when_the_64_bucket_costs_more() -> None:
    """Run 66: batches of 33-40 clauses; the 64-row bucket pads them to 64 rows."""
    costs = {(1, 192): 10.0, (32, 192): 100.0, (64, 192): 200.0}
    groups, eager = plan_rows([150] * 33, costs)
    assert eager == [] and sorted(len(g) for g in groups) == [1, 32]
    # a large fixed part per replay: the whole batch in one replay
    costs = {(1, 192): 60.0, (32, 192): 100.0, (64, 192): 120.0}
    groups, _ = plan_rows([150] * 33, costs)
    assert [len(g) for g in groups] == [33]


def test_long_and_short_clauses_go_to_buckets_of_their_own_length() -> None:
    frames = [190, 30, 185, 28, 180, 31, 170, 25]
    costs = {(8, 192): 80.0, (4, 192): 45.0, (8, 32): 14.0, (4, 32): 12.0}
    groups, eager = plan_rows(frames, costs)
    assert eager == []
    assert sorted(sorted(g) for g in groups) == [[0, 2, 4, 6], [1, 3, 5, 7]]


def test_equal_cost_takes_the_fewer_replays_and_too_long_rows_run_eagerly() -> None:
    costs = {(1, 64): 1.0, (2, 64): 2.0, (4, 64): 4.0}
    groups, eager = plan_rows([10, 20, 30, 40, 500], costs)
    assert eager == [4] and [sorted(g) for g in groups] == [[0, 1, 2, 3]]
    assert plan_rows([], costs) == ([], [])
    assert plan_rows([70, 80], costs) == ([], [0, 1])


def test_a_graph_set_tabulates_its_costs_once_and_again_after_a_capture_or_a_timing() -> None:
    """``TimedBuckets.plan`` reads a table built from its buckets' costs (the plan runs every Kokoro tick); a bucket
    captured or a replay timed since then rebuilds it."""
    from tts.kokoro.graph_buckets import TimedBuckets

    class Set(TimedBuckets):
        def __init__(self) -> None:
            self.init_plan("cost")
            self._buckets = {(1, 64): object(), (4, 64): object()}

    g = Set()
    assert g.plan([50, 50, 50]) == ([[0], [1], [2]], [])  # untimed, each costs its cells: 3 x 64 < 256
    first = g._table
    assert g.plan([10]) == ([[0]], []) and g._table is first  # the same table
    g._buckets[(2, 64)] = object()
    g.plan([10])
    assert g._table is not first
    second = g._table
    g.replay_ms.update({(1, 64): 10.0, (2, 64): 11.0, (4, 64): 12.0})
    assert g.plan([50, 50, 50]) == ([[0, 1, 2]], []) and g._table is not second  # timed: one 4-row replay
