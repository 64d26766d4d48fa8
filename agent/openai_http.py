"""The HTTP library under the installed ``openai`` package, for the client and timeout Cadence hands it.

openai 3.x is built on ``httpx2`` (the 2.x line of httpx, its own module), 1.x-2.x on ``httpx``. A timeout or
client of the other library is refused or half-works depending on the release (openai 3.63 with httpx2 2.17
rejects an ``httpx.Timeout``), so the LLM stage builds both from whichever module openai itself imports.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any


def openai_httpx() -> ModuleType:
    """``httpx2`` where openai is built on it, else ``httpx``."""
    import openai._base_client as base

    lib = getattr(base, "httpx2", None) or getattr(base, "httpx", None)
    if lib is None:  # pragma: no cover - an openai we do not know
        import httpx as lib
    return lib


def llm_timeout(request_s: float, connect_s: float = 2.0) -> Any:
    """A request timeout with a short connect timeout, in openai's own HTTP library."""
    return openai_httpx().Timeout(request_s, connect=connect_s)


def llm_http_client(max_connections: int = 1000, max_keepalive: int = 100) -> Any:
    """A pooled async client of openai's own HTTP library."""
    lib = openai_httpx()
    return lib.AsyncClient(limits=lib.Limits(max_connections=max_connections, max_keepalive_connections=max_keepalive))
