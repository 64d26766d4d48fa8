"""Budgets: samples beyond the budget are counted, a window tail out of budget is a breach."""

from __future__ import annotations

from agent.config import BudgetsConfig
from agent.metrics.budgets import BudgetMonitor
from agent.metrics.stages import StageMetrics


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def make(**budgets) -> tuple[StageMetrics, BudgetMonitor, Clock]:
    clock = Clock()
    metrics = StageMetrics(window_s=60.0, clock=clock)
    return metrics, BudgetMonitor(BudgetsConfig(**budgets), metrics), clock


def test_p99_over_budget_breaches_only_that_stage() -> None:
    metrics, monitor, clock = make(llm_first_token_p99_ms=250.0, asr_final_p99_ms=60.0)
    for i in range(200):
        clock.t += 0.1
        metrics.record("asr_final", 30.0 + i % 10)
        metrics.record("llm_first_token", 120.0 if i % 20 else 400.0)  # 5 % slow: p99 is slow
    states = {s.stage.name for s in monitor.evaluate()}
    assert states == {"llm_first_token"}
    st = monitor.states["llm_first_token"]
    assert st.breach_samples == 10 and st.in_breach and st.tail > 250.0
    assert monitor.states["asr_final"].breach_samples == 0
    reason = monitor.overload_reason()
    assert reason is not None and "llm_first_token p99" in reason and "asr_final" not in reason


def test_breach_is_logged_once_per_window_and_clears_when_the_window_slides() -> None:
    metrics, monitor, clock = make(tts_first_audio_p99_ms=150.0)
    for _ in range(10):
        clock.t += 1.0
        metrics.record("tts_first_audio", 500.0)
    assert monitor.states["tts_first_audio"].breach_windows == 1  # logged once, not ten times
    clock.t += 30.0
    monitor.evaluate()
    assert monitor.states["tts_first_audio"].breach_windows == 1
    clock.t += 90.0  # the slow samples left the window
    assert monitor.overload_reason() is None
    assert not monitor.states["tts_first_audio"].in_breach


def test_ratio_budget_uses_the_low_tail_and_min_samples() -> None:
    metrics, monitor, clock = make(output_rt_ratio_min=1.2, min_samples=5)
    for _ in range(4):
        metrics.record("output_rt_ratio", 0.8)
    assert monitor.overload_reason() is None  # 4 samples: too few to judge
    clock.t += 2.0
    for _ in range(20):
        metrics.record("output_rt_ratio", 3.0)
    monitor.evaluate()
    st = monitor.states["output_rt_ratio"]
    assert st.in_breach and st.tail < 1.2 and st.breach_samples == 4  # p1 is one of the slow replies


def test_one_slow_sample_in_a_small_window_is_not_a_breach_two_are() -> None:
    """A quiet server's first minute: one cold final over budget among a few must not refuse callers for a
    minute (the p99 of a small window is its maximum); a second slow one is a tail, and breaches."""
    metrics, monitor, clock = make(asr_final_p99_ms=600.0, min_samples=5)
    for value in (621.0, 310.0, 280.0, 295.0, 300.0, 305.0):
        clock.t += 2.0
        metrics.record("asr_final", value)
    assert monitor.overload_reason() is None
    st = monitor.states["asr_final"]
    assert st.breach_samples == 1 and st.tail is not None and st.tail < 600.0
    clock.t += 2.0
    metrics.record("asr_final", 640.0)
    clock.t += 2.0
    reason = monitor.overload_reason()
    assert reason is not None and "asr_final p99" in reason


def test_the_judged_percentile_drops_only_the_worst_sample_and_is_p99_past_100() -> None:
    from agent.metrics.budgets import judged_percentile

    assert judged_percentile(2, False) == 99.0 and judged_percentile(2, True) == 1.0
    assert judged_percentile(5, False) == 75.0 and judged_percentile(5, True) == 25.0  # rank 3 of 0..4
    assert judged_percentile(101, False) == 99.0 and judged_percentile(1000, False) == 99.0
    assert judged_percentile(1000, True) == 1.0
