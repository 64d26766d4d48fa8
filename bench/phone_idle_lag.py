"""Event-loop lag of one ``cadence serve`` process against the number of connected phone sessions.

Each session is a real call over ``/phone/ws`` (the light callers of ``cadence capacity --transport
phone``) that keeps its line open and sends 8 kHz mu-law silence every 20 ms, as a live line does,
without speaking: every session runs its whole pipeline (transport, decode and resampling, Silero
VAD on every 32 ms, the turn analyzer, idle ASR/LLM/TTS stages), none triggers the models. That is
the per-session floor a process pays whatever its callers say, and it is the part that grows with
the number of sessions on one event loop. Per level, after the server's windows are reset: the
server's event-loop lag p50/p99/max (a 50 ms timer, ``/metrics``), and the callers' own ticker lag
(their process shares the machine, so it is reported too).

    python bench/phone_idle_lag.py --url http://127.0.0.1:7860 --levels 4,16,32,64 --hold 12 --out lag.json

With ``--workers N`` the bench starts ``cadence serve --workers N`` itself (embedded stack, free ports,
``admission.max_sessions`` = the largest level, budget gate off), reads the parent's summed ``/metrics``
(the event-loop lag quantiles are then the worst worker's) and the CPU of every worker process:

    nice python bench/phone_idle_lag.py --workers 2 --levels 16,32 --hold 12 --out lag-w2.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import sys
import time
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import httpx  # noqa: E402

from agent.capacity.phone_caller import PhoneCaller, Prompt, Ticker  # noqa: E402
from agent.metrics.scrape import parse_metrics  # noqa: E402

A_TONE = Prompt.from_pcm8k("unused", (b"\x00\x10" * 160))  # never spoken: callers stay silent


def cpu_each(pids: list[int] | None) -> list[float] | None:
    """CPU seconds (user + system) each server process has used, its threads included."""
    if not pids:
        return None
    import psutil

    return [sum(psutil.Process(pid).cpu_times()[:2]) for pid in pids]


async def level(url: str, n: int, hold_s: float, pids: list[int] | None = None, metrics_url: str = "") -> dict:
    murl = metrics_url or url
    ws = url.replace("http://", "ws://") + "/phone/ws"
    ticker, stop = Ticker(), asyncio.Event()
    task = asyncio.create_task(ticker.run(stop))
    callers = [PhoneCaller(ws, i, [A_TONE], stop_at=math.inf) for i in range(n)]
    connected = await asyncio.gather(*(c.connect() for c in callers))
    for c in callers:
        c._silence_until = math.inf  # listen only: line silence every 20 ms, no prompt
        ticker.add(c)
    async with httpx.AsyncClient(timeout=30) as http:
        await asyncio.sleep(3.0)  # every pipeline started
        (await http.post(f"{murl}/metrics/reset")).raise_for_status()
        t0, c0 = time.monotonic(), cpu_each(pids)
        await asyncio.sleep(hold_s)
        text = (await http.get(f"{murl}/metrics")).text
        wall, c1 = time.monotonic() - t0, cpu_each(pids)
        ticks0 = ticker.ticks
        health = (await http.get(f"{murl}/health")).json()
    row = parse_metrics(text).rows["event_loop_lag"]
    q = row.quantiles or {}
    each = None if c0 is None or c1 is None else [(b - a) / wall for a, b in zip(c0, c1, strict=True)]
    cores = None if each is None else sum(each)
    result = {"sessions": n, "connected": sum(connected), "hold_s": round(wall, 1),
              "server_cores": None if cores is None else round(cores, 3),
              "server_cpu_ms_per_session_s": None if cores is None else round(cores * 1000 / n, 2),
              "loop_lag_p50_ms": q.get(0.5), "loop_lag_p99_ms": q.get(0.99), "loop_lag_max_ms": row.max,
              "loop_lag_samples": row.count, "caller_ticks": ticks0, "caller_late_ticks": ticker.late_ticks,
              "caller_max_lag_ms": round(ticker.max_lag_s * 1000, 1)}
    if "workers" in health:  # cadence serve --workers N: how the calls and the CPU fell on each worker
        result["worker_sessions"] = [w.get("sessions") for w in health["workers"]]
        result["worker_cores"] = None if each is None else [round(c, 3) for c in each]
    await asyncio.gather(*(c.hang_up() for c in callers))
    stop.set()
    await task
    print(json.dumps(result), flush=True)
    return result


async def main_async(args: argparse.Namespace, url: str, pids: list[int] | None, metrics_url: str = "") -> list[dict]:
    rows = []
    for n in args.levels:
        rows.append(await level(url, n, args.hold, pids, metrics_url))
        await asyncio.sleep(2.0)
    return rows


def with_workers(args: argparse.Namespace) -> dict:
    """Start ``cadence serve --workers N`` (1: the plain single process), run the levels, stop it."""
    from agent.llm_server import free_port
    from testkit.servers import cadence_serve

    mport = free_port()
    sets = [f"server.workers={args.workers}", f"admission.max_sessions={max(args.levels)}",
            "admission.budget_gate=false", *args.set]
    if args.workers > 1:
        sets.append(f"server.metrics_listen=127.0.0.1:{mport}")
    with cadence_serve(*sets, timeout_s=600.0) as srv:
        if args.workers > 1:
            murl = f"http://127.0.0.1:{mport}"
            pids = [w["pid"] for w in httpx.get(f"{murl}/health", timeout=10).json()["workers"]]
        else:
            murl, pids = srv["url"], [srv["proc"].pid]
        rows = asyncio.run(main_async(args, srv["url"], pids, murl))
    return {"levels": rows, "workers": args.workers, "server_pids": pids, "overrides": sets}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", default="http://127.0.0.1:7860")
    parser.add_argument("--levels", default="4,16,32,64")
    parser.add_argument("--hold", type=float, default=12.0)
    parser.add_argument("--pid", type=int, help="the server's pid: report its CPU use (psutil)")
    parser.add_argument("--metrics-url", default="", help="where /metrics is read (default: --url)")
    parser.add_argument("--workers", type=int, help="start `cadence serve --workers N` here and measure it")
    parser.add_argument("--set", action="append", default=[], help="with --workers: a config override")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    args.levels = [int(x) for x in args.levels.split(",")]
    if args.workers:
        out = with_workers(args)
    else:
        rows = asyncio.run(main_async(args, args.url, [args.pid] if args.pid else None, args.metrics_url))
        out = {"levels": rows, "url": args.url}
    out |= {"command": "python " + " ".join(sys.argv), "commit": _commit(), "cpus": os.cpu_count()}
    if args.out:
        args.out.write_text(json.dumps(out, indent=1))


def _commit() -> str:
    import subprocess

    r = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                       cwd=Path(__file__).resolve().parents[1])
    return r.stdout.strip()


if __name__ == "__main__":
    main()
