"""Read a Cadence ``/metrics`` page back into a per-stage table (for ``cadence stats``)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families

from agent.metrics.stages import STAGES


@dataclass
class StageRow:
    stage: str
    unit: str
    count: int = 0  # samples in the window
    quantiles: dict[float, float] | None = None
    max: float | None = None
    min: float | None = None
    budget: float | None = None
    breach_samples: int = 0
    in_breach: bool = False


@dataclass
class Scrape:
    rows: dict[str, StageRow]
    gauges: dict[str, float]
    refusals: dict[str, float]


def _num(v: float) -> float | None:
    return None if math.isnan(v) else v


def parse_metrics(text: str) -> Scrape:
    rows = {s.name: StageRow(s.name, s.unit, quantiles={}) for s in STAGES}
    gauges: dict[str, float] = {}
    refusals: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            stage = sample.labels.get("stage")
            row = rows.get(stage) if stage else None
            name, value = sample.name, sample.value
            if row is not None:
                if name in ("cadence_stage_latency_ms", "cadence_stage_ratio") and "quantile" in sample.labels:
                    v = _num(value)
                    if v is not None:
                        row.quantiles[float(sample.labels["quantile"])] = v
                elif name == "cadence_stage_window_count":
                    row.count = int(value)
                elif name == "cadence_stage_window_max":
                    row.max = _num(value)
                elif name == "cadence_stage_window_min":
                    row.min = _num(value)
                elif name == "cadence_budget":
                    row.budget = value
                elif name == "cadence_budget_breach_samples_total":
                    row.breach_samples = int(value)
                elif name == "cadence_budget_in_breach":
                    row.in_breach = value >= 1.0
            elif name == "cadence_refusals_total":
                refusals[sample.labels.get("reason", "")] = value
            elif not sample.labels:
                gauges[name] = value
    return Scrape(rows, gauges, refusals)


def format_table(scrape: Scrape) -> str:
    def cell(v: float | None, ratio: bool) -> str:
        if v is None:
            return f"{'-':>8s}"
        return f"{v:7.2f}x" if ratio else f"{v:8.1f}"

    head = f"{'stage':24s} {'n':>6s} {'p50':>8s} {'p95':>8s} {'p99':>8s} {'max':>8s} {'budget':>8s} {'breaches':>9s}"
    lines = [head, "-" * len(head)]
    for row in scrape.rows.values():
        ratio = row.unit == "x"
        q = row.quantiles or {}
        # For a ratio the bad tail is low: show p50, p5, p1 and the minimum in the same columns.
        cols = ([q.get(0.5), q.get(0.05), q.get(0.01), row.min] if ratio
                else [q.get(0.5), q.get(0.95), q.get(0.99), row.max])
        budget = cell(row.budget, ratio) if row.budget is not None else f"{'':>8s}"
        flag = " BREACH" if row.in_breach else ""
        lines.append(f"{row.stage:24s} {row.count:6d} " + " ".join(cell(c, ratio) for c in cols)
                     + f" {budget} {row.breach_samples:9d}{flag}")
    lines.append("(ms; output_rt_ratio in x real time with columns p50, p5, p1, min: its bad tail is low)")
    g = scrape.gauges
    if "cadence_sessions_active" in g:
        refused = ", ".join(f"{k} {int(v)}" for k, v in scrape.refusals.items() if v) or "none"
        lines.append(f"sessions {int(g['cadence_sessions_active'])}/{int(g.get('cadence_sessions_capacity', 0))}, "
                     f"waiting {int(g.get('cadence_sessions_waiting', 0))}, "
                     f"ready {'yes' if g.get('cadence_ready') else 'no'}, refused: {refused}")
    return "\n".join(lines)
