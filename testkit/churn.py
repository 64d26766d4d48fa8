"""Connect/drop churn against a real in-process ``cadence serve``: the driver ``bench/churn.py`` and
``tests/reliability/test_churn.py`` share (see bench/churn.py for the benchmark).
"""


from __future__ import annotations

import asyncio
import gc
import os
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import psutil


@dataclass
class Point:
    cycle: int
    fds: int
    threads: int
    rss_mib: float
    seconds: float
    cyclic: int = 0  # objects the full collection at this point freed: cycles left since the previous point


@dataclass
class ChurnResult:
    cycles: int
    warmup: int
    points: list[Point] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)

    def growth_kib_per_cycle(self) -> float:
        warm = next(p for p in self.points if p.cycle >= self.warmup)
        last = self.points[-1]
        return (last.rss_mib - warm.rss_mib) * 1024 / max(1, last.cycle - warm.cycle)

    def cyclic_per_cycle(self) -> float:
        """Objects a call left in reference cycles (freed only by a full collection), after warm-up."""
        warm = next(p for p in self.points if p.cycle >= self.warmup)
        later = [p for p in self.points if p.cycle > warm.cycle]  # each counts the cycles since the point before
        return sum(p.cyclic for p in later) / max(1, self.points[-1].cycle - warm.cycle)

    def drift(self) -> tuple[int, int]:
        """(fds, threads) at the end minus after warm-up."""
        warm = next(p for p in self.points if p.cycle >= self.warmup)
        return self.points[-1].fds - warm.fds, self.points[-1].threads - warm.threads


def measure(cycle: int, t0: float) -> Point:
    cyclic = gc.collect()
    return Point(cycle, len(os.listdir("/proc/self/fd")), threading.active_count(),
                 psutil.Process().memory_info().rss / 2**20, time.monotonic() - t0, cyclic)


async def _until(check, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return True
        await asyncio.sleep(0.02)
    return check()


async def webrtc_cycle(server: Any, base_url: str, clean: bool, api_key: str = "") -> None:
    from transports.webrtc_client import WebRTCCaller

    caller = WebRTCCaller(base_url, api_key)
    try:
        await caller.connect()
        if not await _until(lambda: caller.pc.connectionState == "connected" and server.running_sessions() > 0,
                            15.0):
            raise RuntimeError(f"WebRTC session never ran (pc {caller.pc.connectionState})")
    finally:
        if clean:
            await caller.close()
        else:  # vanish: the media stops and the peer is dropped without a DTLS/SCTP goodbye
            if caller._reader is not None:
                caller._reader.cancel()
            for t in caller.pc.getTransceivers():
                await t.stop()
            await caller.pc.close()


async def phone_cycle(server: Any, ws_url: str, clean: bool, api_key: str = "") -> None:
    from transports.phone.loopback_caller import LoopbackCaller

    caller = LoopbackCaller(ws_url, custom_parameters={"token": api_key} if api_key else None)
    await caller.connect()
    try:
        if not await _until(lambda: server.running_sessions() > 0, 15.0):
            raise RuntimeError(f"phone session never ran ({caller.close_code} {caller.close_reason})")
    finally:
        await (caller.hang_up() if clean else caller.drop())


async def churn(server: Any, base_url: str, cycles: int, warmup: int, report_every: int = 100,
                api_key: str = "", echo: bool = True) -> ChurnResult:
    """Run ``cycles`` connect/drop cycles against ``server`` served at ``base_url``."""
    result = ChurnResult(cycles, warmup)
    ws_url = base_url.replace("http://", "ws://") + "/phone/ws"
    t0 = time.monotonic()
    result.points.append(measure(0, t0))
    for k in range(1, cycles + 1):
        clean = (k // 2) % 2 == 0
        try:
            if k % 2:
                await webrtc_cycle(server, base_url, clean, api_key)
            else:
                await phone_cycle(server, ws_url, clean, api_key)
        except Exception as exc:
            result.failures.append(f"cycle {k}: {type(exc).__name__}: {exc}")
        if not await _until(lambda: server.gate.active == 0, 30.0):
            result.failures.append(f"cycle {k}: slot not back after 30 s")
        if k % report_every == 0 or k == warmup:
            point = measure(k, t0)
            result.points.append(point)
            if echo:
                print(f"cycle {k:5d}: fds {point.fds:4d}  threads {point.threads:3d}  RSS {point.rss_mib:7.1f} MiB"
                      f"  in cycles {point.cyclic:6d}  ({point.seconds:.0f} s, {len(result.failures)} failures)",
                      flush=True)
    return result
