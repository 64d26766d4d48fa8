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
import json
import os
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from testkit.churn import ChurnResult, churn  # noqa: E402, F401


def _commit() -> str:
    import subprocess

    run = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False,
                         cwd=Path(__file__).resolve().parent)
    return os.environ.get("CADENCE_COMMIT") or run.stdout.strip() or "unknown"


async def _main(args: argparse.Namespace) -> dict[str, Any]:
    from aiohttp import web

    from agent.config import load_config
    from agent.pipeline import Engines
    from agent.server_factory import make_server

    config = load_config(None, ["vad.turn=silence", *args.set])
    server = make_server(config)
    await server.start_engines()  # llama.cpp child (supervised as in serve), engines
    assert isinstance(server.engines, Engines)
    supervisor = asyncio.create_task(server.llm_server.supervise()) if server.llm_server else None
    runner = web.AppRunner(server.make_app(), access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    base = f"http://127.0.0.1:{runner.addresses[0][1]}"
    server.freeze_heap()  # as serve: the call path's lazy imports, then the freeze
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
               "cyclic_objects_per_cycle": round(result.cyclic_per_cycle(), 1),
               "points": [asdict(p) for p in result.points], "cpu_count": os.cpu_count(),
               "commit": _commit(), "command": " ".join(sys.argv)}
    print(f"after warm-up ({result.warmup} cycles): fds {fds:+d}, threads {threads:+d}, "
          f"RSS {summary['rss_growth_kib_per_cycle']:+.1f} KiB/cycle, {summary['cyclic_objects_per_cycle']:.0f} objects "
          f"a cycle left for the cyclic collector; {len(result.failures)} failures")
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
