"""Several LLM servers behind one Cadence, each call pinned to one of them.

``llm.replicas = N`` (a GPU ``llm.server``) starts N servers on the GPU, each on 1/N of the LLM's memory
share; ``llm.base_url`` may also list several servers, comma-separated. Each call takes the next replica in
turn and keeps it for its whole life, so the server's prefix cache holds that call's history. Why: a
server whose scheduler runs in Python (transformers serve) spends more time per step the more streams it
carries, so at 64+ callers the first token waits behind everyone else's decode; N replicas split the
streams (and the Python work) N ways on a GPU that has room for N copies of a 1-8B model.
"""

from __future__ import annotations

import asyncio
import itertools
import os
from dataclasses import dataclass, field
from typing import Any


def replica_urls(base_url: str) -> list[str]:
    """The servers ``llm.base_url`` names (comma-separated), trailing slashes dropped; [] when empty."""
    urls = [u.strip().rstrip("/") for u in base_url.split(",")]
    if any(not u for u in urls) and base_url.strip():
        raise ValueError(f"llm.base_url has an empty entry: {base_url!r} (comma-separated URLs)")
    return [u for u in urls if u]


@dataclass
class ReplicaPicker:
    """Round-robin over the replicas, one pick per call; ``start`` spreads worker processes apart."""

    urls: list[str]
    start: int = field(default_factory=os.getpid)
    _turn: Any = field(init=False, repr=False)

    def __post_init__(self) -> None:
        if not self.urls:
            raise ValueError("no LLM server to pick from")
        self._turn = itertools.count(self.start % len(self.urls))

    def pick(self) -> str:
        return self.urls[next(self._turn) % len(self.urls)]


@dataclass
class LLMServerGroup:
    """The managed servers of ``llm.replicas``, seen as one (up, stop, supervise, pids, base_url)."""

    servers: list[Any] = field(default_factory=list)  # agent.llm_server.ManagedLLMServer

    @property
    def up(self) -> bool:
        return bool(self.servers) and all(s.up for s in self.servers)

    @property
    def base_url(self) -> str:
        return ",".join(s.base_url for s in self.servers)

    @property
    def model_id(self) -> str:
        return self.servers[0].model_id if self.servers else ""

    @property
    def pid(self) -> int | None:
        return self.servers[0].pid if self.servers else None

    @property
    def pids(self) -> list[int]:
        return [p for s in self.servers for p in s.pids]

    def stop(self) -> None:
        for server in self.servers:
            server.stop()

    async def supervise(self, poll_s: float = 0.5) -> None:
        await asyncio.gather(*(s.supervise(poll_s) for s in self.servers))
