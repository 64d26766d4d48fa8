"""Merge the ``/metrics`` pages of ``cadence serve --workers N`` into one page.

Counters, histogram buckets, summary counts and sums, and gauges that count things (sessions,
capacity, window samples, bytes) add. The sliding-window quantiles cannot be merged exactly: the
merged q-quantile lies between the workers' smallest and largest q-quantile, so the page shows the
worst side (the largest latency quantile, the smallest delivery-ratio quantile); ``cadence_ready``
and ``*_window_min`` take the minimum, ``*_window_max``, budgets and breach flags the maximum.
"""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client import generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import CollectorRegistry

MIN_GAUGES = {"cadence_ready", "cadence_stage_window_min"}
MAX_GAUGES = {"cadence_stage_window_max", "cadence_budget", "cadence_budget_in_breach", "cadence_event_loop_info",
              "cadence_gc_freeze_enabled"}
MIN_QUANTILES = {"cadence_stage_ratio"}  # a delivery ratio: its low quantiles are the bad side


def _rule(family: Metric, sample_name: str, labels: dict[str, str]) -> str:
    if family.type == "summary" and "quantile" in labels:
        return "min" if family.name in MIN_QUANTILES else "max"
    if family.type == "gauge" and family.name in MIN_GAUGES:
        return "min"
    if family.type == "gauge" and (family.name in MAX_GAUGES or family.name.endswith("_info")):
        return "max"
    if sample_name.endswith("_created") or "start_time" in sample_name:
        return "min"
    return "sum"


def _combine(rule: str, old: float, new: float) -> float:
    if old != old:  # NaN (an empty window) gives way to any number
        return new
    if new != new:
        return old
    return {"sum": old + new, "min": min(old, new), "max": max(old, new)}[rule]


class _Merged:
    def __init__(self, families: list[Metric]) -> None:
        self.families = families

    def collect(self) -> Iterable[Metric]:
        return self.families


def merge_metrics(texts: Iterable[str]) -> str:
    """One Prometheus text page from several (see the module docstring for how samples combine)."""
    families: dict[str, Metric] = {}
    values: dict[str, dict[tuple, list]] = {}
    for text in texts:
        for fam in text_string_to_metric_families(text):
            merged = families.setdefault(fam.name, Metric(fam.name, fam.documentation, fam.type, fam.unit))
            table = values.setdefault(fam.name, {})
            for s in fam.samples:
                key = (s.name, tuple(sorted(s.labels.items())))
                if key in table:
                    table[key][1] = _combine(table[key][0], table[key][1], s.value)
                else:
                    table[key] = [_rule(merged, s.name, s.labels), s.value]
    for name, table in values.items():
        for (sample_name, labels), (_rule_name, value) in table.items():
            families[name].add_sample(sample_name, dict(labels), value)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Merged(list(families.values())))
    return generate_latest(registry).decode()
