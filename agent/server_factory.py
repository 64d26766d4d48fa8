"""Build a ``CadenceServer`` with every installed extension (metrics, phone transport, ...).

An extension is a module with ``install(server: CadenceServer) -> None`` that adds routes,
observers or replaces the admission gate. A missing optional module is skipped.
"""

from __future__ import annotations

from agent.config import Config
from agent.optional import import_optional
from agent.serve import CadenceServer

EXTENSIONS = (
    "agent.metrics_http",
    "agent.phone_routes",
)


def make_server(config: Config, extensions: tuple[str, ...] = EXTENSIONS) -> CadenceServer:
    server = CadenceServer(config)
    for name in extensions:
        module = import_optional(name)
        if module is None:
            continue
        module.install(server)
    return server
