"""Kokoro's first-clause lane: streams' first clauses run on a worker of their own, never behind later clauses."""

from __future__ import annotations

import time
from collections.abc import Iterator

import numpy as np
import pytest

from tests.gputts.conftest import g2p_kind

LONG = "One moment please, I am looking up your order and the delivery date for you now."


@pytest.fixture(scope="module")
def lane_engine() -> Iterator[object]:
    from tts.kokoro.engine import KokoroEngine
    from tts.kokoro.options import KokoroOptions

    eng = KokoroEngine(KokoroOptions(tiny=True, device="cpu", max_batch=16, warmup=False, g2p=g2p_kind(),
                                     first_clause_words=3, first_lane=True, first_lane_max_batch=4,
                                     first_lane_max_tokens=40))
    assert eng.batcher.first_lane and eng.first_model is not eng.model
    yield eng
    eng.close()


def _ids(engine, words: int) -> list[int]:
    ids = engine.phoneme_ids(" ".join(["word"] * words))
    assert ids
    return ids


async def test_first_clauses_take_their_own_lane(lane_engine):
    eng, stats = lane_engine, lane_engine.batcher.stats
    ticks, lane_ticks, lane_utts = stats.ticks, stats.first_lane_ticks, stats.first_lane_utterances
    short = _ids(eng, 3)
    with eng.batcher.held():
        later = eng.batcher.enqueue(eng.utterance(_ids(eng, 6)), deadline=time.monotonic() + 30)
        firsts = [eng.batcher.enqueue(eng.utterance(short)) for _ in range(3)]  # due now: first clauses
    for r in firsts:
        await r.future
    await later.future
    # the three first clauses in one tick of the first lane, the later clause in one of the main lane's
    assert stats.first_lane_ticks == lane_ticks + 1 and stats.first_lane_utterances == lane_utts + 3
    assert stats.ticks == ticks + 2


async def test_the_main_lane_takes_what_the_first_lane_cannot(lane_engine):
    eng, batcher = lane_engine, lane_engine.batcher
    short, long_ids = _ids(eng, 3), eng.phoneme_ids(LONG)
    assert len(long_ids) > 38  # past the lane's 40 - 2 ids: its graphs would not hold it
    with batcher.held():
        first_long = batcher.enqueue(eng.utterance(long_ids))
        firsts = [batcher.enqueue(eng.utterance(short)) for _ in range(6)]
        with batcher._cond:
            lane = next(x for x in batcher._lanes if x.firsts_only)
            main = next(x for x in batcher._lanes if not x.firsts_only)
            assert batcher._candidates(lane) == [t.ticket for t in firsts]  # the long one is not the lane's
            # while the lane is free the main lane leaves it the short first clauses
            assert batcher._candidates(main) == [first_long.ticket]
            lane.in_flight = 4  # ...and once it is busy, takes first clauses too, earliest deadline first
            assert batcher._candidates(main) == [first_long.ticket] + [t.ticket for t in firsts]
            lane.in_flight = 0
    for r in [first_long, *firsts]:
        assert len(await r.future) > 0
    assert batcher.pending == 0


async def test_first_lane_audio_equals_the_main_lanes(lane_engine):
    eng = lane_engine
    ids = eng.phoneme_ids("Thanks for waiting.")
    first = await eng.batcher.synthesize(eng.utterance(ids, seed=5))  # due now: the first lane
    later = await eng.batcher.synthesize(eng.utterance(ids, seed=5), deadline=time.monotonic() + 30)  # main
    assert np.abs(first - later).max() < 1e-4


async def test_streams_and_cancellation_with_two_lanes(lane_engine):
    eng = lane_engine
    pieces = [p async for p in eng.synthesize_stream("Sure, I can help. Your order ships today. Bye now.")]
    assert len(pieces) == 3 and all(pieces)
    stream = eng.synthesize_stream("Sure, I can help. Your order ships today. Bye now.")
    assert await stream.__anext__()
    await stream.aclose()  # a caller who hangs up after the first clause leaves nothing queued
    assert eng.batcher.pending == 0


def test_lane_view_shares_weights_not_graphs():
    from tts.kokoro import config as kconfig
    from tts.kokoro.checkpoint import build_random

    model = build_random(kconfig.tiny_config(), seed=0)
    model.graphs = object()
    view = model.lane_view()
    assert view.graphs is None and view.text_graphs is None and model.graphs is not None
    assert view.decoder is model.decoder and next(view.parameters()) is next(model.parameters())
    assert view.phase_s is not model.phase_s


def test_the_load_report_counts_the_first_lanes_ticks_and_phases(lane_engine, caplog, tmp_path):
    import re

    from agent.engine_server import _phases
    from tests.gputts.conftest import engine_load_lines

    lane_phases = sum(lane_engine.first_model.phase_s.values())
    lines, pieces = engine_load_lines(lane_engine, ["Sure, I can help. Bye now."], caplog, tmp_path)
    assert pieces[0], pieces
    lane = [re.search(r"first lane ticks (\d+) mean batch", m) for m in lines]
    assert sum(int(m.group(1)) for m in lane if m) >= 1, lines  # the stream's first clause took the first lane
    assert sum(lane_engine.first_model.phase_s.values()) > lane_phases
    both = _phases(lane_engine)  # the report's phase seconds: both lanes' together
    assert sum(both.values()) >= sum(lane_engine.model.phase_s.values()) + sum(lane_engine.first_model.phase_s.values()) - 1e-9
