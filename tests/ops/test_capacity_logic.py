"""The capacity tool's arithmetic: turns from chunk arrivals, stream ratios, the knee, the cap file."""

from __future__ import annotations

import tomllib

import pytest

from agent.capacity.analysis import (
    LevelResult,
    judge_level,
    knee,
    next_level,
    stream_ratio,
    turn_deliveries,
)
from agent.capacity.caller import CallRecord
from agent.capacity.report import plot, write_cap


def record(caller: int, turns: list[tuple[float, list[tuple[float, float]]]]) -> CallRecord:
    """``turns``: (end of speech, [(arrival, seconds), ...]); utterances last 1 s."""
    r = CallRecord(caller, speech_seconds=[1.0] * len(turns))
    for eos, chunks in turns:
        r.speech_ends.append(eos)
        r.chunks.extend(chunks)
    return r


def test_chunks_are_split_by_turn_and_judged() -> None:
    # Turn 1: first audio 0.8 s after speech, 2 s of audio then 1 s more arriving 1.0 s later (2x).
    # Turn 2: an underrun: 0.5 s of audio, the next piece 1.0 s later (0.5x, 500 ms late).
    r = record(0, [(10.0, [(10.8, 2.0), (11.8, 1.0)]), (20.0, [(21.0, 0.5), (22.0, 0.5)])])
    t1, t2 = turn_deliveries(r)
    assert t1.first_audio_ms == pytest.approx(800.0) and t1.ratio == pytest.approx(2.0)
    assert t1.lateness_ms == (0.0,)
    assert t2.ratio == pytest.approx(0.5) and t2.lateness_ms == (pytest.approx(500.0),)
    # The stream: (2.0 + 0.5) s delivered ahead over (1.0 + 1.0) s of delivery.
    assert stream_ratio([t1, t2]) == pytest.approx(1.25)


def test_unanswered_turn_makes_the_stream_zero() -> None:
    r = record(0, [(10.0, [(10.5, 1.0), (10.6, 1.0)]), (20.0, [])])
    turns = turn_deliveries(r)
    assert [t.answered for t in turns] == [True, False]
    assert stream_ratio(turns) == 0.0


def test_level_verdict_uses_the_low_tail_across_streams_and_budget_breaches() -> None:
    good = [record(i, [(10.0, [(10.5, 2.0), (11.0, 2.0)])]) for i in range(4)]  # 4x each
    slow = record(9, [(10.0, [(10.5, 1.0), (11.5, 1.0)])])  # 1x
    ok = judge_level(4, good, 0.0, 100.0, 1.2, [])
    assert ok.passed and ok.p99_ratio == pytest.approx(4.0) and ok.streams == 4
    bad = judge_level(5, good + [slow], 0.0, 100.0, 1.2, [])
    assert not bad.passed and bad.p99_ratio == pytest.approx(1.12) and "p99 delivery 1.12x" in bad.reasons[0]
    breached = judge_level(4, good, 0.0, 100.0, 1.2, ["asr_final p99 900 ms > budget 600 ms"])
    assert not breached.passed and breached.reasons == ["asr_final p99 900 ms > budget 600 ms"]
    outside = judge_level(4, good, 50.0, 100.0, 1.2, [])  # no turn ended in the steady state
    assert not outside.passed and "only 0 of 4 streams" in outside.reasons[0]


def lv(n: int, passed: bool) -> LevelResult:
    return LevelResult(n, passed=passed, p99_ratio=3.0 / n, p50_ratio=4.0 / n)


def test_ramp_then_bisect_to_the_knee() -> None:
    ramp = [1, 2, 4, 8, 16]
    levels: list[LevelResult] = []
    assert next_level(levels, ramp, True) == 1
    levels += [lv(1, True), lv(2, True), lv(4, True)]
    assert next_level(levels, ramp, True) == 8
    levels.append(lv(8, False))
    assert next_level(levels, ramp, True) == 6 and next_level(levels, ramp, False) is None
    levels.append(lv(6, True))
    assert next_level(levels, ramp, True) == 7
    levels.append(lv(7, False))
    assert next_level(levels, ramp, True) is None
    assert knee(levels) == 6
    assert knee([lv(1, False), lv(2, True)]) == 0  # a pass above a failure is not trusted


def test_cap_is_written_into_an_existing_config(tmp_path) -> None:
    cfg = tmp_path / "cadence.toml"
    cfg.write_text('# my server\n[llm]\nmax_tokens = 48\n\n[admission]\nqueue_size = 3\nmax_sessions = 9\n\n'
                   '[tts]\nengine = "piper"\n')
    write_cap(cfg, 2)
    data = tomllib.loads(cfg.read_text())
    assert data["admission"] == {"queue_size": 3, "max_sessions": 2}
    assert data["llm"]["max_tokens"] == 48 and data["tts"]["engine"] == "piper"
    assert cfg.read_text().startswith("# my server")
    fresh = tmp_path / "new.toml"
    write_cap(fresh, 5)
    assert tomllib.loads(fresh.read_text()) == {"admission": {"max_sessions": 5}}
    no_key = tmp_path / "nokey.toml"
    no_key.write_text("[admission]\nqueue_size = 1\n")
    write_cap(no_key, 3)
    assert tomllib.loads(no_key.read_text())["admission"] == {"queue_size": 1, "max_sessions": 3}


def test_curve_png_is_drawn(tmp_path) -> None:
    out = tmp_path / "curve.png"
    plot(out, 2, [lv(1, True), lv(2, True), lv(4, False)], 1.2)
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and out.stat().st_size > 10_000


def test_curve_of_a_phone_level_with_no_data_is_still_drawn(tmp_path) -> None:
    # a first level where no caller had a judged turn (every figure None) crashed the plot, and with
    # it the whole capacity run, in a CPU dry run of bench/h200_cascade.sh
    out = tmp_path / "empty.png"
    plot(out, 0, [LevelResult(2, passed=False, reasons=["no judged turn"], transport="phone")], 1.2)
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_server_counts_keep_the_withdrawn_speculations_by_reason() -> None:
    """The capacity line reads the exporter's own page: the withdrawals summed and split by why."""
    from agent.capacity.phone_ramp import server_counts
    from agent.metrics.prometheus import CadenceCollector, make_registry, render
    from agent.metrics.stages import StageMetrics
    from agent.speculative_turn import SpeculationStats

    stats = SpeculationStats(started={"quiet": 7, "final": 2}, confirmed=4, withdrawn={"resumed": 3, "newer_partial": 2})
    page = render(make_registry(CadenceCollector(StageMetrics(), speculation=lambda: stats))).decode()
    counts = server_counts(page)
    assert counts["speculations"] == 9 and counts["confirmed"] == 4 and counts["withdrawn"] == 5
    assert counts["withdrawn_resumed"] == 3 and counts["withdrawn_newer_partial"] == 2


def test_callers_connect_over_the_warm_up_or_over_connect_s():
    import random

    from agent.capacity.phone_ramp import PhoneRampOptions, connect_delay

    rng = random.Random(1)
    default = [connect_delay(rng, PhoneRampOptions(warmup_s=8.0)) for _ in range(2000)]
    assert min(default) >= 0.0 and max(default) <= 4.8 and max(default) > 4.5  # 0.6 x warm-up, as before
    spread = [connect_delay(rng, PhoneRampOptions(warmup_s=14.0, connect_s=11.0)) for _ in range(2000)]
    assert max(spread) <= 11.0 and max(spread) > 10.5
    assert 0.2 < sum(d < 5.5 for d in spread) / len(spread) < 0.8  # uniform: about half in each half
