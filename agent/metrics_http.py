"""Server extension: per-session observers feed shared histograms, ``/metrics`` exports them.

``install(server)`` (called by ``agent.server_factory``) creates the process-wide
``StageMetrics`` and ``BudgetMonitor``, gives every session a ``MetricsObserver``, makes the
admission gate consult the budgets (a stage out of budget refuses new callers), runs the
event-loop/GC monitor while the app lives, and serves ``GET /metrics`` (Prometheus text).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST
from prometheus_client.registry import CollectorRegistry

from agent.admission import AdmissionGate
from agent.metrics.budgets import BudgetMonitor
from agent.metrics.prometheus import CadenceCollector, make_registry, render
from agent.metrics.runtime_monitor import RuntimeMonitor
from agent.metrics.stages import StageMetrics


@dataclass
class ServerMetrics:
    stages: StageMetrics
    budgets: BudgetMonitor
    registry: CollectorRegistry
    runtime: RuntimeMonitor


METRICS_KEY = web.AppKey("cadence_metrics", ServerMetrics)


def install(server) -> ServerMetrics:  # server: agent.serve.CadenceServer
    cfg = server.config
    stages = StageMetrics(cfg.budgets.window_s)
    budgets = BudgetMonitor(cfg.budgets, stages)
    overloaded = budgets.overload_reason if cfg.admission.budget_gate else None
    if server.gate is None:
        server.gate = AdmissionGate(cfg.admission, overloaded=overloaded)
    elif overloaded is not None:
        server.gate.set_overloaded(overloaded)
    registry = make_registry(CadenceCollector(
        stages, budgets, lambda: server.gate, gpu_memory=getattr(server, "gpu_memory_now", None),
        speculation=lambda: server.engines.speculation_stats if server.engines is not None else None))
    bundle = ServerMetrics(stages, budgets, registry, RuntimeMonitor(stages))

    from agent.metrics.observer import MetricsObserver

    server.observer_factories.append(lambda session_id: MetricsObserver(stages, session_id))
    _export_phone_stats(stages)

    def hook(app: web.Application, _server) -> None:
        app[METRICS_KEY] = bundle
        app.router.add_get("/metrics", metrics_handler)
        app.router.add_post("/metrics/reset", reset_handler)
        app.on_startup.append(_start_monitor)
        app.on_cleanup.append(_stop_monitor)

    server.route_hooks.append(hook)
    return bundle


# Phone transport figures -> stages (output_chunk_lateness is already recorded by the observer).
PHONE_STAGES = {"output_pacer_lateness_ms": "phone_pacer_lateness", "output_underrun_gap_ms": "phone_underrun_gap",
                "barge_in_clear_ms": "barge_in_clear", "input_lag_ms": "phone_input_lag"}


def _export_phone_stats(stages: StageMetrics) -> None:
    try:
        from transports.phone.stats import PHONE_STATS
    except ImportError:
        return

    def listener(name: str, value: float) -> None:
        if name in PHONE_STAGES:
            stages.record(PHONE_STAGES[name], value)

    PHONE_STATS.add_listener(listener)


async def metrics_handler(request: web.Request) -> web.Response:
    body = render(request.app[METRICS_KEY].registry)
    return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})


LOOPBACK = ("127.0.0.1", "::1")


async def reset_handler(request: web.Request) -> web.Response:
    """Start every stage window afresh (``cadence capacity`` calls it when a level's hold begins);
    loopback callers only. Lifetime counters are kept."""
    if request.remote not in LOOPBACK:
        return web.json_response({"error": "only from loopback"}, status=403)
    bundle = request.app[METRICS_KEY]
    bundle.stages.clear()
    bundle.budgets.evaluate()
    torch = sys.modules.get("torch")  # only a process that already runs torch has GPU peaks to reset
    if torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.reset_peak_memory_stats()
    return web.json_response({"reset": True})


async def _start_monitor(app: web.Application) -> None:
    app[METRICS_KEY].runtime.start()


async def _stop_monitor(app: web.Application) -> None:
    await app[METRICS_KEY].runtime.stop()
