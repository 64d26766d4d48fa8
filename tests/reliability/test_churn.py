"""WebRTC and phone connect/drop churn on the real server: fds and threads flat, RSS bounded.

The CI-sized run of ``bench/churn.py`` (``CADENCE_CHURN_CYCLES``, default 100: half real aiortc
peers, half phone calls; half hang up, half vanish). Before: sessions of peers that vanished were
never released (33 of them held fds and ~20 MB each).
"""

from __future__ import annotations

import os

from agent import phone_routes
from testkit.churn import churn
from tests.ops.helpers import make_server
from tests.reliability.helpers import served

CYCLES = int(os.environ.get("CADENCE_CHURN_CYCLES", "100"))
WARMUP = min(40, CYCLES // 2)


async def test_connect_drop_churn_leaks_nothing(embedded):
    server, _ = make_server(embedded, admission={"max_sessions": 2, "queue_size": 0}, vad={"turn": "silence"},
                            session={"connect_timeout_s": 5.0, "idle_timeout_s": 5.0})
    phone_routes.install(server)
    async with served(server.make_app()) as base:
        result = await churn(server, base, CYCLES, WARMUP, report_every=20, echo=False)
    assert not result.failures, result.failures[:5]
    assert server.gate.active == 0 and not server.live
    fds, threads = result.drift()
    growth = result.growth_kib_per_cycle()
    figures = [(p.cycle, p.fds, p.threads, round(p.rss_mib)) for p in result.points]
    assert fds <= 4, f"fds grew by {fds}: {figures}"
    assert threads <= 2, f"threads grew by {threads}: {figures}"
    assert growth < 512, f"RSS grew {growth:.0f} KiB per cycle after warm-up: {figures}"


def test_cyclic_objects_are_counted_from_the_first_point_past_warm_up():
    """A warm-up between two points: the point that ends it counts cycles of the warm-up, so it is the baseline."""
    from testkit.churn import ChurnResult, Point

    points = [Point(c, 10, 2, 100.0, 0.0, cyclic) for c, cyclic in ((0, 0), (100, 500), (200, 400), (300, 60))]
    result = ChurnResult(cycles=300, warmup=150, points=points, failures=[])
    assert result.cyclic_per_cycle() == 0.6  # 60 objects over cycles 200-300
