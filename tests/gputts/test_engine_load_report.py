"""The engine process's load report says where Kokoro's batches spent their time: issuing the text side's
and the decoder's work vs waiting for their results (host-bound vs GPU-bound)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re

from agent.engine_server import EngineServer, _pieces, report_load


def test_load_report_splits_kokoro_time_into_launch_and_wait(engine, caplog, tmp_path) -> None:
    server = EngineServer(engine, tmp_path / "engine.sock")

    async def run() -> None:
        reporter = asyncio.create_task(report_load(server, every_s=0.2, tick_s=0.01))
        async with contextlib.aclosing(_pieces(engine, "Hello there, how are you today?", None, None)) as pieces:
            assert [p async for p in pieces]
        await asyncio.sleep(0.5)
        reporter.cancel()

    with caplog.at_level(logging.INFO, logger="cadence.engine"):
        asyncio.run(run())
    lines = [r.getMessage() for r in caplog.records if "engine load" in r.getMessage()]
    assert lines, caplog.text
    shares = [dict((k, float(v)) for k, v in re.findall(r"(text_launch|text_wait|rest_launch|rest_wait) ([0-9.]+)", m))
              for m in lines]
    assert all(len(s) == 4 for s in shares), lines
    # the interval that held the synthesis spent time in every phase the forward passes through
    assert any(s["text_launch"] > 0 and s["rest_launch"] > 0 for s in shares), lines
    assert sum(engine.batcher.model.phase_s.values()) > 0


def test_load_report_gives_the_first_clauses_queue_wait_and_the_tick_times(engine, caplog, tmp_path) -> None:
    """The line an MPS A/B reads: what a stream's first clause waited in Kokoro's queue and what the ticks cost.
    Two streams at once: each has one first clause (due at once), the later clauses are not counted as first."""
    server = EngineServer(engine, tmp_path / "engine.sock")
    engine.batcher.drain_timings()  # what earlier tests left

    async def run() -> None:
        reporter = asyncio.create_task(report_load(server, every_s=0.2, tick_s=0.01))

        async def one(text: str) -> None:
            async with contextlib.aclosing(_pieces(engine, text, None, None)) as pieces:
                assert len([p async for p in pieces]) >= 2

        await asyncio.gather(one("Hello there, how are you today? I can help."),
                             one("Sure, your order shipped. It arrives on Thursday."))
        await asyncio.sleep(0.5)
        reporter.cancel()

    with caplog.at_level(logging.INFO, logger="cadence.engine"):
        asyncio.run(run())
    found = [re.search(r"first-clause wait p50 (\d+) p99 (\d+) ms \(n (\d+)\), tick p50 (\d+) p99 (\d+) ms",
                       r.getMessage()) for r in caplog.records if "engine load" in r.getMessage()]
    found = [m for m in found if m]
    assert found, caplog.text
    assert sum(int(m.group(3)) for m in found) == 2  # one first clause per stream, the later ones not
    for m in found:
        p50, p99, tick50, tick99 = (int(m.group(i)) for i in (1, 2, 4, 5))
        assert p50 <= p99 and tick50 <= tick99 and tick99 > 0, m.group(0)
