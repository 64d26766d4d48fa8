"""Connect/drop churn against a real in-process ``cadence serve``: WebRTC (aiortc) and phone (WebSocket) callers.

Each cycle is one caller on loopback: WebRTC (a real aiortc peer: offer, ICE, DTLS, media) or a
phone call (Twilio protocol: handshake, media), alternating; every other one hangs up cleanly,
the rest vanish (peer closed without a word / TCP reset). A cycle waits until its session is
running, then until its slot is back. Every ``report_every`` cycles the process's open fds,
threads and RSS are printed; after ``warmup`` cycles the RSS growth per cycle is the leak figure
(issue 15: flat fds and threads, under 50 KB per cycle).

    nice python bench/churn.py --cycles 1000 --out bench/results/churn_cpu.json
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import sys
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


@dataclass
class Point:
    cycle: int
    fds: int
    threads: int
    rss_mib: float
    seconds: float


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

    def drift(self) -> tuple[int, int]:
        """(fds, threads) at the end minus after warm-up."""
        warm = next(p for p in self.points if p.cycle >= self.warmup)
        return self.points[-1].fds - warm.fds, self.points[-1].threads - warm.threads


def measure(cycle: int, t0: float) -> Point:
    gc.collect()
    return Point(cycle, len(os.listdir("/proc/self/fd")), threading.active_count(),
                 psutil.Process().memory_info().rss / 2**20, time.monotonic() - t0)


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
                      f"  ({point.seconds:.0f} s, {len(result.failures)} failures)", flush=True)
    return result


async def _main(args: argparse.Namespace) -> dict[str, Any]:
    from aiohttp import web

    from agent.config import load_config
    from agent.pipeline import Engines
    from agent.runtime import freeze_gc_heap
    from agent.server_factory import make_server

    config = load_config(None, ["vad.turn=silence", *args.set])
    server = make_server(config)
    await server.start_engines()  # llama.cpp child (supervised as in serve), engines, GC freeze
    assert isinstance(server.engines, Engines)
    supervisor = asyncio.create_task(server.llm_server.supervise()) if server.llm_server else None
    runner = web.AppRunner(server.make_app(), access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    base = f"http://127.0.0.1:{runner.addresses[0][1]}"
    freeze_gc_heap()
    try:
        result = await churn(server, base, args.cycles, args.warmup, args.report_every, config.server.api_key)
    finally:
        if supervisor is not None:
            supervisor.cancel()
        await runner.cleanup()
    fds, threads = result.drift()
    summary = {"cycles": result.cycles, "warmup": result.warmup, "failures": result.failures[:20],
               "failure_count": len(result.failures), "fd_drift": fds, "thread_drift": threads,
               "rss_growth_kib_per_cycle": round(result.growth_kib_per_cycle(), 2),
               "points": [asdict(p) for p in result.points], "cpu_count": os.cpu_count()}
    print(f"after warm-up ({result.warmup} cycles): fds {fds:+d}, threads {threads:+d}, "
          f"RSS {summary['rss_growth_kib_per_cycle']:+.1f} KiB/cycle; {len(result.failures)} failures")
    return summary


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cycles", type=int, default=1000)
    parser.add_argument("--warmup", type=int, default=200)
    parser.add_argument("--report-every", type=int, default=100)
    parser.add_argument("--set", action="append", default=[], help="config override section.key=value")
    parser.add_argument("--out", type=Path, help="write the figures here (JSON)")
    args = parser.parse_args()
    from agent.cli import setup_logging

    setup_logging("WARNING")
    summary = asyncio.run(_main(args))
    if args.out:
        args.out.write_text(json.dumps(summary, indent=1) + "\n")
    return 0 if not summary["failure_count"] else 1


if __name__ == "__main__":
    sys.exit(main())
