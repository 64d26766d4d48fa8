"""How many of a length class's pending windows to run now, when the engine replays fixed batch sizes.

The fast Parakeet backend replays each profile at its whole batch, so 39 windows on a class with a 16 and a
64 profile cost one 64 replay, and 20 windows cost a 64 replay where two 16 replays may cost less. Given the
measured seconds of each batch size of the class (``engine.batch_costs(length_class)``), ``first_take`` returns
the first batch of the cheapest set of replays that runs every pending window (largest batch first, so the
oldest windows go now); the rest waits one batch and joins the windows that arrive meanwhile.

A replay runs its whole batch, so a batch of 50 windows on a 64 profile leaves 14 rows that cost nothing:
``replay_rows`` names the batch a take replays; the window batcher fills its free rows with shorter windows,
and the engine runs such a batch as one replay of its longest class
(``asr.offline.parakeet_fast.cheapest_groups``).
"""

from __future__ import annotations

from collections.abc import Sequence


def cheapest_plan(pending: int, costs: Sequence[tuple[int, float]]) -> list[int]:
    """Batch counts (largest first) that run ``pending`` windows at the least total cost.

    ``costs``: (batch size, seconds of one replay) per profile; a replay of ``k`` windows costs its
    smallest profile that holds ``k``. A window count no profile holds is split over the largest.
    """
    if pending <= 0:
        return []
    table = sorted((int(b), float(s)) for b, s in costs if b > 0)
    if not table:
        return [pending]

    def replay(k: int) -> float:
        return next(s for b, s in table if b >= k)

    sizes = sorted({b for b, _ in table})
    # bottom-up: best[n] = (total cost, first batch) of the cheapest plan for n windows; ties take the larger batch
    best: list[tuple[float, int]] = [(0.0, 0)]
    for n in range(1, pending + 1):
        best.append(min((replay(min(n, b)) + best[n - min(n, b)][0], -min(n, b)) for b in sizes))
        best[n] = (best[n][0], -best[n][1])
    plan, n = [], pending
    while n:
        plan.append(best[n][1])
        n -= best[n][1]
    return sorted(plan, reverse=True)


def first_take(pending: int, costs: Sequence[tuple[int, float]] | None, max_batch: int) -> int:
    """Windows to run now out of ``pending`` (at most ``max_batch``): all of them without ``costs``."""
    n = min(pending, max_batch)
    if not costs or pending <= 0:
        return n
    usable = [(b, s) for b, s in costs if b <= max_batch] or list(costs)
    largest = max(b for b, _ in usable)
    # past a few of the largest batches the plan only adds more of them: plan the next few only
    return min(cheapest_plan(min(pending, 4 * largest), usable)[0], n)


def replay_rows(take: int, costs: Sequence[tuple[int, float]] | None) -> int:
    """The rows of the replay that runs ``take`` windows: the smallest profile batch holding them (``take``
    itself without costs, or when no profile holds it)."""
    fitting = [int(b) for b, _ in costs or () if b >= take]
    return min(fitting, default=take)

