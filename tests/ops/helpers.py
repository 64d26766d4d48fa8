"""Build a server around shared engines with a fresh metrics bundle and config."""

from __future__ import annotations

import copy
import dataclasses

from agent import metrics_http
from agent.serve import CadenceServer
from transports.webrtc import transport_params


def make_server(embedded, engines=None, **sections) -> tuple[CadenceServer, metrics_http.ServerMetrics]:
    """``sections``: e.g. ``admission={"max_sessions": 1}`` applied over the default config."""
    config = copy.deepcopy(embedded.config)
    for section, values in sections.items():
        setattr(config, section, dataclasses.replace(getattr(config, section), **values))
    server = CadenceServer(config)
    bundle = metrics_http.install(server)
    server.engines = dataclasses.replace(engines or embedded.engines, config=config)
    return server, bundle


def params(server: CadenceServer):
    cfg = server.config
    return transport_params(cfg.audio.in_sample_rate, cfg.audio.out_sample_rate)


def gate_admit(server: CadenceServer):
    async def admit() -> str | None:
        refusal = await server.gate.acquire()
        return None if refusal is None else f"{refusal.status} {refusal.kind}: {refusal.reason}"

    return admit
