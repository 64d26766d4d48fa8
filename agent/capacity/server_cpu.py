"""Where a capacity level's server CPU went: the session workers, the engine processes, the LLM server.

``cadence capacity`` runs next to the server it measures (loopback), so it can read the CPU time of the server's
process tree: the parent named by ``/health`` and its descendants, grouped by what they run. Per level it reports
cores (CPU seconds per wall second) per group; runs 60-62 needed ``top`` output to see that 8 session workers were
at a core each. Without psutil, or for a server on another machine, there is nothing to report.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

GROUPS = ("workers", "engines", "llm", "other")


def _group(cmdline: list[str], worker_pids: set[int], pid: int) -> str:
    text = " ".join(cmdline)
    if pid in worker_pids:
        return "workers"
    if "agent.engine_server" in text:
        return "engines"
    if any(k in text for k in ("transformers.cli", "transformers serve", "llama-server", "agent.llama_serve", "vllm")):
        return "llm"
    return "other"


class ServerCpu:
    """The CPU seconds of a local server's process tree, grouped (``GROUPS``; the parent counts as ``other``
    unless it serves calls itself, as a single process does)."""

    def __init__(self, parent_pid: int, worker_pids: set[int]):
        import psutil

        self._psutil = psutil
        self.parent_pid = parent_pid
        # a single process (no --workers) serves the calls itself: it is the one worker
        self.worker_pids = worker_pids or {parent_pid}

    @classmethod
    def from_health(cls, health: dict[str, Any]) -> ServerCpu | None:
        """From the server's ``/health`` body; None when psutil is missing or the pid is not on this machine."""
        try:
            import psutil
        except ImportError:
            return None
        pid = health.get("pid")
        if not isinstance(pid, int) or not psutil.pid_exists(pid):
            return None
        workers = {w["pid"] for w in health.get("workers", []) if isinstance(w.get("pid"), int)}
        return cls(pid, workers)

    def sample(self) -> tuple[float, dict[str, float]]:
        """(monotonic time, CPU seconds per group) of the tree as it is now."""
        psutil = self._psutil
        totals = dict.fromkeys(GROUPS, 0.0)
        try:
            parent = psutil.Process(self.parent_pid)
            procs = [parent, *parent.children(recursive=True)]
        except psutil.Error:
            return time.monotonic(), totals
        groups: dict[int, str] = {}
        for p in procs:  # parents before their children (psutil lists the tree top-down)
            try:
                t = p.cpu_times()
                group = _group(p.cmdline(), self.worker_pids, p.pid)
                if group == "other" and p.pid != self.parent_pid:  # a helper process counts with its parent's group
                    group = groups.get(p.ppid(), "other")
            except psutil.Error:  # gone meanwhile
                continue
            groups[p.pid] = group
            totals[group] += t.user + t.system
        return time.monotonic(), totals

    @staticmethod
    def cores(before: tuple[float, dict[str, float]], after: tuple[float, dict[str, float]]) -> dict[str, float]:
        """Cores per group between two samples (a process that ended between them drops out of ``after``: its
        group can read low, never high)."""
        wall = after[0] - before[0]
        if wall <= 0:
            return {}
        return {g: round(max(0.0, after[1][g] - before[1][g]) / wall, 3) for g in GROUPS}


def tree_cpu_seconds(pid: int) -> tuple[float, float]:
    """User + system CPU seconds so far of ``pid`` itself, and of its descendants (Linux /proc).

    The descendants' figure is every live descendant's own time plus the time of the reaped children of every
    process in the tree (``cutime`` + ``cstime``), so a descendant that exits between two reads (a cold run's
    compile workers: run 103's first arm read -0.75 server CPU s for the mix) keeps its time in the sum."""
    tick = os.sysconf("SC_CLK_TCK")
    stats: dict[int, tuple[int, float, float]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        stats[int(stat.parent.name)] = (int(fields[1]), (int(fields[11]) + int(fields[12])) / tick,
                                        (int(fields[13]) + int(fields[14])) / tick)
    children: dict[int, list[int]] = {}
    for child, (ppid, _, _) in stats.items():
        children.setdefault(ppid, []).append(child)
    _, own, reaped = stats.get(pid, (0, 0.0, 0.0))
    descendants, frontier = reaped, list(children.get(pid, ()))
    while frontier:
        p = frontier.pop()
        descendants += stats[p][1] + stats[p][2]
        frontier.extend(children.get(p, ()))
    return own, descendants
