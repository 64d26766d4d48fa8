"""Per-stage jitter budgets: count breaches, log once per window, and tell the gate.

Every sample beyond its stage's budget is counted at once (``breach_samples``). Every
``eval_interval_s`` the window's p99 (the 1st percentile for a ratio, whose bad tail is low)
is compared with the budget: a stage whose window tail is out of budget is *in breach*; it
is logged at most once per window and counted in ``breach_windows``. ``overload_reason``
names the stages in breach, for the admission gate.

A window's judged tail is never its single worst sample: below ~100 samples the p99 of a window is its
maximum, so one cold first inference (a 621 ms final against a 600 ms budget, the first minute of a quiet
2-core server) refused every caller for a minute. With n >= 3 samples the judged tail is the p99, or the
second-worst sample where that is lower (the p1 or the second-best for a ratio); a tail out of budget takes
two slow samples or the slowest 1%.
"""

from __future__ import annotations

from dataclasses import dataclass

from loguru import logger

from agent.config import BudgetsConfig
from agent.metrics.stages import STAGES, Stage, StageMetrics


@dataclass
class BudgetState:
    stage: Stage
    limit: float
    breach_samples: int = 0
    breach_windows: int = 0
    in_breach: bool = False
    tail: float | None = None  # last evaluated window p99 (p1 for a ratio)
    samples: int = 0  # samples in the window at the last evaluation
    _last_logged: float = float("-inf")

    def beyond(self, value: float) -> bool:
        return value < self.limit if self.stage.higher_is_better else value > self.limit

    def describe(self) -> str:
        unit = "x" if self.stage.unit == "x" else " ms"
        tail = "p1" if self.stage.higher_is_better else "p99"
        cmp = "<" if self.stage.higher_is_better else ">"
        return f"{self.stage.name} {tail} {self.tail:.4g}{unit} {cmp} budget {self.limit:.4g}{unit}"


def judged_percentile(n: int, higher_is_better: bool) -> float:
    """The percentile a window of ``n`` samples is judged at: p99 (p1 for a ratio), but never its single worst
    sample once there are 3 or more (the second worst, at numpy-style interpolation, is rank n - 2)."""
    if n < 3:
        return 1.0 if higher_is_better else 99.0
    spare = 100.0 / (n - 1)  # one rank of the interpolated order statistics, in percent
    return max(1.0, spare) if higher_is_better else min(99.0, 100.0 - spare)


class BudgetMonitor:
    """Watches ``StageMetrics`` against ``BudgetsConfig``."""

    def __init__(self, config: BudgetsConfig, metrics: StageMetrics, eval_interval_s: float = 1.0):
        self.config = config
        self.metrics = metrics
        self.eval_interval_s = eval_interval_s
        self.min_samples = config.min_samples
        self.states: dict[str, BudgetState] = {}
        for stage in STAGES:
            if stage.budget_field is None:
                continue
            limit = float(getattr(config, stage.budget_field, 0.0) or 0.0)
            if limit > 0:
                self.states[stage.name] = BudgetState(stage, limit)
        self._next_eval = float("-inf")
        metrics.add_listener(self.on_sample)

    def on_sample(self, stage: str, value: float, now: float) -> None:
        state = self.states.get(stage)
        if state is not None and state.beyond(value):
            state.breach_samples += 1
        if now >= self._next_eval:
            self.evaluate(now)

    def evaluate(self, now: float | None = None) -> list[BudgetState]:
        """Re-judge every budget over the current window; return those in breach."""
        now = self.metrics.clock() if now is None else now
        self._next_eval = now + self.eval_interval_s
        breached = []
        for name, state in self.states.items():
            hist = self.metrics.histograms[name]
            state.samples = hist.count(now)
            state.tail = hist.percentile(judged_percentile(state.samples, state.stage.higher_is_better), now)
            state.in_breach = (state.samples >= self.min_samples and state.tail is not None
                               and state.beyond(state.tail))
            if state.in_breach:
                breached.append(state)
                if now - state._last_logged >= self.metrics.window_s:
                    state._last_logged = now
                    state.breach_windows += 1
                    logger.warning(f"jitter budget breached: {state.describe()} "
                                   f"({state.samples} samples in the last {self.metrics.window_s:.0f} s)")
        return breached

    def overload_reason(self) -> str | None:
        """Why a new caller should wait (stages out of budget), or None."""
        now = self.metrics.clock()
        states = self.evaluate(now) if now >= self._next_eval else [s for s in self.states.values() if s.in_breach]
        return "; ".join(s.describe() for s in states) if states else None
