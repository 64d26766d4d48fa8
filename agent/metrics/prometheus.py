"""Prometheus text export of the stage histograms, budgets, admission gate and runtime.

Names (all prefixed ``cadence_``):
- ``stage_latency_ms{stage,quantile}`` summary: window p50/p95/p99, lifetime _count/_sum;
  ``stage_ratio{stage,quantile}`` the same for ratios, with the low tail (0.01, 0.05, 0.5);
- ``stage_window_max{stage}``, ``stage_window_min{stage}``, ``stage_window_count{stage}``;
- ``budget{stage}``, ``budget_in_breach{stage}``, ``budget_breach_samples_total{stage}``,
  ``budget_breach_windows_total{stage}``;
- ``sessions_active``, ``sessions_waiting``, ``sessions_capacity``, ``ready``,
  ``admissions_total``, ``refusals_total{reason}``;
- ``gpu_memory_share_bytes{stage}``, ``gpu_memory_measured_bytes{stage}`` (GPU configurations);
- ``vad_windows_total``, ``vad_runs_total``: Silero windows scored and the batched ONNX runs that scored
  them (``agent.vad_batcher``; windows / runs is the mean batch);
- ``llm_requests_total``: chat completions sent to the LLM server (``agent.llm_stage``);
  ``llm_replies_dropped_total{why}``: speculative replies it dropped as withdrawn, ``withdrawn_unstarted`` /
  ``withdrawn_late`` (``agent.withdrawn_speculation``);
  ``speculations_started_total{trigger}``, ``speculations_confirmed_total``, ``speculations_withdrawn_total{reason}``:
  speculative replies (``agent.speculative_turn``);
- ``turn_ends_total{by}``: what ended the callers' turns, ``model`` / ``silence`` / ``finished_text`` / ``no_words`` / ``timeout``
  (``agent.turn_ends``);
- ``gc_frozen_objects``, ``event_loop_info{loop}``.
"""

from __future__ import annotations

import asyncio
import gc
import sys
from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from agent.admission import AdmissionGate
from agent.metrics.budgets import BudgetMonitor
from agent.metrics.stages import STAGES, StageMetrics
from agent.runtime import FreezeWatch

MS_QUANTILES = (0.5, 0.95, 0.99)
RATIO_QUANTILES = (0.01, 0.05, 0.5)  # a ratio's bad tail is the low one


class CadenceCollector(Collector):
    def __init__(self, metrics: StageMetrics, budgets: BudgetMonitor | None = None,
                 gate: Callable[[], AdmissionGate | None] | None = None,
                 gpu_memory: Callable[[], list[Any]] | None = None, speculation: Callable[[], Any] | None = None):
        """``speculation``: () -> the process's ``agent.speculative_turn.SpeculationStats`` (or None)."""
        self.metrics = metrics
        self.speculation = speculation or (lambda: None)
        self.budgets = budgets
        self.gate = gate or (lambda: None)
        self.gpu_memory = gpu_memory  # () -> [agent.gpu_memory.StageMemory]

    def collect(self) -> Iterator[Metric]:
        yield from self._stages()
        if self.budgets is not None:
            yield from self._budgets()
        gate = self.gate()
        if gate is not None:
            yield from self._gate(gate)
        if self.gpu_memory is not None:
            yield from self._gpu_memory(self.gpu_memory())
        yield GaugeMetricFamily("cadence_gc_frozen_objects", "objects moved out of GC by gc.freeze()",
                                value=gc.get_freeze_count())
        late = FreezeWatch.imported_since()
        if late is not None:  # each such module's objects are walked by every full collection
            yield GaugeMetricFamily("cadence_modules_after_gc_freeze",
                                    "modules imported after the GC heap was frozen", value=late)
        yield from _vad_batches()
        yield from _asr_fallback()
        yield from _llm_requests()
        yield from _turn_ends()
        stats = self.speculation()
        if stats is not None:
            yield from _speculations(stats)
        info = GaugeMetricFamily("cadence_event_loop_info", "the running event loop", labels=["loop"])
        info.add_metric([_loop_name()], 1)
        yield info

    def _stages(self) -> Iterator[Metric]:
        now = self.metrics.clock()
        latency = Metric("cadence_stage_latency_ms", "per-stage latency over the sliding window (ms)", "summary")
        ratio = Metric("cadence_stage_ratio", "per-reply delivery ratio (x real time) over the window", "summary")
        wmax = GaugeMetricFamily("cadence_stage_window_max", "largest sample in the window", labels=["stage"])
        wmin = GaugeMetricFamily("cadence_stage_window_min", "smallest sample in the window", labels=["stage"])
        wcount = GaugeMetricFamily("cadence_stage_window_count", "samples in the window", labels=["stage"])
        for stage in STAGES:
            h = self.metrics.histograms[stage.name]
            family, qs = (ratio, RATIO_QUANTILES) if stage.unit == "x" else (latency, MS_QUANTILES)
            values = h.percentiles([q * 100.0 for q in qs], now)
            for q, v in zip(qs, values, strict=True):
                family.add_sample(family.name, {"stage": stage.name, "quantile": repr(q)},
                                  float("nan") if v is None else v)
            family.add_sample(family.name + "_count", {"stage": stage.name}, h.count_total)
            family.add_sample(family.name + "_sum", {"stage": stage.name}, h.sum_total)
            hi, lo = h.max(now), h.min(now)
            wmax.add_metric([stage.name], float("nan") if hi is None else hi)
            wmin.add_metric([stage.name], float("nan") if lo is None else lo)
            wcount.add_metric([stage.name], h.count(now))
        yield from (latency, ratio, wmax, wmin, wcount)
        yield CounterMetricFamily("cadence_turns", "turns timed", value=self.metrics.turns_total)
        yield CounterMetricFamily("cadence_replies", "bot replies timed", value=self.metrics.replies_total)

    def _budgets(self) -> Iterator[Metric]:
        assert self.budgets is not None
        self.budgets.evaluate()
        limit = GaugeMetricFamily("cadence_budget", "the stage's budget (ms; x for a ratio)", labels=["stage"])
        breach = GaugeMetricFamily("cadence_budget_in_breach", "1 while the window tail is out of budget",
                                   labels=["stage"])
        samples = CounterMetricFamily("cadence_budget_breach_samples", "samples beyond the budget",
                                      labels=["stage"])
        windows = CounterMetricFamily("cadence_budget_breach_windows", "windows logged in breach",
                                      labels=["stage"])
        for name, st in self.budgets.states.items():
            limit.add_metric([name], st.limit)
            breach.add_metric([name], 1.0 if st.in_breach else 0.0)
            samples.add_metric([name], st.breach_samples)
            windows.add_metric([name], st.breach_windows)
        yield from (limit, breach, samples, windows)

    @staticmethod
    def _gpu_memory(stages: list[Any]) -> Iterator[Metric]:
        if not stages:
            return
        share = GaugeMetricFamily("cadence_gpu_memory_share_bytes", "a stage's planned GPU memory share",
                                  labels=["stage"])
        used = GaugeMetricFamily("cadence_gpu_memory_measured_bytes",
                                 "a stage's measured GPU memory (asr/tts: load + warm-up peak; llm: NVML now; "
                                 "in_process: torch reserved now)", labels=["stage"])
        for st in stages:
            share.add_metric([st.stage], st.share_bytes)
            if st.measured_bytes is not None:
                used.add_metric([st.stage], st.measured_bytes)
        yield from (share, used)

    def _gate(self, gate: AdmissionGate) -> Iterator[Metric]:
        ok, _reason = gate.ready()
        yield GaugeMetricFamily("cadence_sessions_active", "callers talking now", value=gate.active)
        yield GaugeMetricFamily("cadence_sessions_waiting", "callers in the wait queue", value=gate.waiting)
        yield GaugeMetricFamily("cadence_sessions_capacity", "the admission cap", value=gate.capacity)
        yield GaugeMetricFamily("cadence_ready", "1 if a new caller would be admitted now", value=1.0 if ok else 0.0)
        yield CounterMetricFamily("cadence_admissions", "callers admitted", value=gate.stats.admitted_total)
        refusals = CounterMetricFamily("cadence_refusals", "callers refused at connect", labels=["reason"])
        for kind in ("queue_full", "queue_timeout", "overloaded"):
            refusals.add_metric([kind], gate.stats.refused.get(kind, 0))
        yield refusals


def _vad_batches() -> Iterator[Metric]:
    """The batched Silero VAD's totals, where this process has loaded it (never imports it)."""
    module = sys.modules.get("agent.vad_batcher")
    if module is None:
        return
    windows, runs = module.totals()
    yield CounterMetricFamily("cadence_vad_windows", "Silero VAD windows scored", value=windows)
    yield CounterMetricFamily("cadence_vad_runs", "batched Silero ONNX runs", value=runs)


def _llm_requests() -> Iterator[Metric]:
    """Chat completions sent, where this process has loaded the LLM stage (never imports it)."""
    module = sys.modules.get("agent.llm_stage")
    if module is not None:
        yield CounterMetricFamily("cadence_llm_requests", "chat completions sent to the LLM server",
                                  value=module.TOTALS.sent)
        dropped = CounterMetricFamily("cadence_llm_replies_dropped",
                                      "speculative replies the LLM stage dropped as withdrawn", labels=["why"])
        for why, count in module.TOTALS.dropped.items():
            dropped.add_metric([why], count)
        yield dropped


def _turn_ends() -> Iterator[Metric]:
    """What ended the turns, where this process has loaded a turn analyzer (never imports it)."""
    module = sys.modules.get("agent.turn_ends")
    if module is None:
        return
    family = CounterMetricFamily("cadence_turn_ends", "caller turns ended, by what ended them", labels=["by"])
    for by in module.BY:
        family.add_metric([by], module.TURN_ENDS[by])
    yield family


def _speculations(stats: Any) -> Iterator[Metric]:
    started = CounterMetricFamily("cadence_speculations_started", "speculative replies started", labels=["trigger"])
    for trigger, n in sorted(stats.started.items()):
        started.add_metric([trigger], n)
    withdrawn = CounterMetricFamily("cadence_speculations_withdrawn", "speculative replies thrown away",
                                    labels=["reason"])
    for reason, n in sorted(stats.withdrawn.items()):
        withdrawn.add_metric([reason], n)
    yield started
    yield CounterMetricFamily("cadence_speculations_confirmed", "speculative replies used", value=stats.confirmed)
    yield withdrawn


def _asr_fallback() -> Iterator[Metric]:
    """Moonshine's and Whisper's transcripts under ``asr.fallback`` (never imports the module)."""
    module = sys.modules.get("asr.moonshine.whisper_fallback")
    if module is None:
        return
    family = CounterMetricFamily("cadence_asr_transcripts", "transcripts by the engine that wrote them",
                                 labels=["engine"])
    for engine in ("moonshine", "whisper"):
        family.add_metric([engine], getattr(module.TOTALS, engine))
    yield family


def _loop_name() -> str:
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        return "none"
    module = type(loop).__module__
    return "uvloop" if module.startswith("uvloop") else "asyncio"


def make_registry(collector: CadenceCollector) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    return registry


def render(registry: CollectorRegistry) -> bytes:
    return generate_latest(registry)
