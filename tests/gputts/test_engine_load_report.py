"""The engine process's load report says where Kokoro's batches spent their time: issuing the text side's
and the decoder's work vs waiting for their results (host-bound vs GPU-bound)."""

from __future__ import annotations

import re
import time

from tests.gputts.conftest import HeldModel, engine_load_lines


def test_load_report_splits_kokoro_time_into_launch_and_wait(engine, caplog, tmp_path) -> None:
    lines, pieces = engine_load_lines(engine, ["Hello there, how are you today?"], caplog, tmp_path)
    assert pieces[0] and lines, caplog.text
    shares = [dict((k, float(v)) for k, v in re.findall(r"(text_launch|text_wait|rest_launch|rest_wait) ([0-9.]+)", m))
              for m in lines]
    assert all(len(s) == 4 for s in shares), lines
    # the interval that held the synthesis spent time in every phase the forward passes through
    assert any(s["text_launch"] > 0 and s["rest_launch"] > 0 for s in shares), lines
    assert sum(engine.batcher.model.phase_s.values()) > 0


def test_load_report_gives_the_first_clauses_queue_wait_and_the_tick_times(engine, caplog, tmp_path) -> None:
    """The line an MPS A/B reads: what a stream's first clause waited in Kokoro's queue and what the ticks cost.
    Two streams at once: each has one first clause (due at once), the later clauses are not counted as first."""
    engine.batcher.drain_timings()  # what earlier tests left
    texts = ["Hello there, how are you today? I can help.", "Sure, your order shipped. It arrives on Thursday."]
    lines, pieces = engine_load_lines(engine, texts, caplog, tmp_path)
    assert all(n >= 2 for n in pieces), pieces
    found = [re.search(r"first-clause wait p50 (\d+) p99 (\d+) ms \(n (\d+)\), tick p50 (\d+) p99 (\d+) ms", m)
             for m in lines]
    found = [m for m in found if m]
    assert found, caplog.text
    assert sum(int(m.group(3)) for m in found) == 2  # one first clause per stream, the later ones not
    for m in found:
        p50, p99, tick50, tick99 = (int(m.group(i)) for i in (1, 2, 4, 5))
        assert p50 <= p99 and tick50 <= tick99 and tick99 > 0, m.group(0)


def test_a_first_clause_wait_is_not_lost_to_a_drain_during_its_tick(engine) -> None:
    from tts.kokoro.batcher import SynthesisBatcher

    model = HeldModel(engine.model)
    batcher = SynthesisBatcher(model, max_batch=4)  # type: ignore[arg-type]
    try:
        request = batcher.submit_future(engine.utterance(engine.phoneme_ids("Hello there.")), time.monotonic())
        deadline = time.monotonic() + 10
        while not batcher.in_flight and time.monotonic() < deadline:
            time.sleep(0.005)
        assert batcher.in_flight == 1
        assert batcher.drain_timings() == ([], [])  # the tick runs: neither its wait nor its time is filed yet
        model.release.set()
        assert len(request.future.result(30)) > 0
        waits, ticks = batcher.drain_timings()
        assert len(waits) == 1 and len(ticks) == 1 and waits[0] >= 0
    finally:
        model.release.set()
        batcher.close()
