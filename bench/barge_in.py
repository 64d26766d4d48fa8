"""Barge-in over the phone path, measured by the caller: speech onset -> silence at the caller.

A Twilio-style caller (``transports.phone.loopback_caller``) calls ``cadence serve`` (the embedded
default models unless ``--set`` says otherwise; a fresh call per trial unless ``--turns-per-call``
says more), then, per trial, asks a question
(an Asterisk prompt, real 8 kHz telephone speech, in real time), waits for the spoken answer and
speaks over it after a random 0.3-1.2 s. Everything is timed on the caller's clock:

* **onset**: when the interrupting prompt's first voiced 20 ms began leaving the caller;
* **silence at the caller**: when the caller's playout buffer (a model of the provider's: each
  chunk plays after the ones before it, ``clear`` drops the rest) stopped playing bot speech;
* **clear**: when the ``clear`` message arrived.

Reports p50 / p95 / max (nearest rank) of onset -> silence and onset -> clear over the trials,
every trial's row (including the ones not counted and why), the commit, and the conditions
(cores, load, phone options). Writes JSON under bench/results/.

    python bench/barge_in.py --trials 30                 # starts cadence serve itself
    python bench/barge_in.py --url http://127.0.0.1:7860 --trials 30
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import random
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from testkit.phone_prompts import pcm8k, speech_onset_s  # noqa: E402
from transports.phone.loopback_caller import LoopbackCaller  # noqa: E402
from transports.phone.options import PhoneOptions  # noqa: E402
from transports.phone.stats import percentile  # noqa: E402

QUESTIONS = ["agent-pass", "cannot-complete-as-dialed", "check-number-dial-again", "conf-getpin",
             "all-circuits-busy-now", "queue-thankyou", "vm-incorrect", "pbx-invalid", "privacy-unident"]
INTERRUPTIONS = ["hello-world", "auth-thankyou", "vm-goodbye"]
DELAY_S = (0.3, 1.2)  # how far into the answer the caller starts speaking


async def trial(caller: LoopbackCaller, question: str, interruption: str, delay_s: float) -> dict[str, Any]:
    """Ask, speak over the answer ``delay_s`` after its first voiced audio; one row of caller-clock timings."""
    row: dict[str, Any] = {"question": question, "interruption": interruption, "delay_s": round(delay_s, 3)}
    asked = await caller.say(pcm8k(question))
    first = None
    deadline = time.monotonic() + 20.0
    while ((first := caller.first_voiced_after(asked.last)) is None and time.monotonic() < deadline
           and not caller.closed.is_set()):
        await asyncio.sleep(0.02)
    if first is None and caller.closed.is_set():  # the admission gate refused the call (load) or it failed
        return {**row, "counted": False, "why": f"call closed by the server ({caller.close_code}): {caller.close_reason}"}
    if first is None:
        return {**row, "counted": False, "why": "no answer within 20 s"}
    await asyncio.sleep(max(0.0, first + delay_s - time.monotonic()))
    speech = pcm8k(interruption)
    spoken = await caller.say(speech)
    onset = spoken.started(speech_onset_s(speech))
    clears = [t for t in caller.inbound.clears if first < t < spoken.last]
    silent = caller.speech_heard_until(first, spoken.last)  # the answer to the interruption comes later
    row.update(onset_to_clear_ms=None if not clears else round((clears[0] - onset) * 1000.0, 1),
               onset_to_silence_ms=None if silent is None else round((silent - onset) * 1000.0, 1))
    await caller.wait_reply(spoken.last, timeout_s=20)  # let the bot answer the interruption
    await asyncio.sleep(0.5)
    if silent is None or silent <= onset:
        return {**row, "counted": False, "why": "no bot speech playing at the onset (a pause, or the answer had ended)"}
    return {**row, "counted": True}


def summary(values: list[float]) -> dict[str, Any]:
    if not values:
        return {"n": 0}
    return {"n": len(values), "p50": percentile(values, 50), "p95": percentile(values, 95),
            "max": max(values), "min": min(values)}


async def run_call(url: str, trials: int, seed: int, turns_per_call: int = 1,
                   ) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """``trials`` barge-ins over calls of ``turns_per_call`` trials each; the rows and the calls' merged record.

    A fresh call per trial (the default) gives each question the model's answer to it alone: in one long call
    the embedded 135M model soon echoes the caller's short prompts, so most answers end before the caller
    speaks over them and the trial cannot count (13 of 40 at 388959e)."""
    rng = random.Random(seed)
    rows: list[dict[str, Any]] = []
    merged: dict[str, Any] = {"stats": {"barge_in_clear_ms": [], "barge_in_resumed": 0}, "calls": 0}
    ws = url.replace("http://", "ws://") + "/phone/ws"
    while len(rows) < trials:
        caller = await LoopbackCaller(ws).connect()
        try:
            await asyncio.sleep(0.5)
            if not merged["calls"]:
                warm = await caller.say(pcm8k("vm-goodbye"))  # first turn: lazy loads and caches, not counted
                await caller.wait_reply(warm.last, timeout_s=30)
                await asyncio.sleep(0.5)
            for _ in range(min(turns_per_call, trials - len(rows))):
                i = len(rows)
                row = await trial(caller, QUESTIONS[i % len(QUESTIONS)], INTERRUPTIONS[i % len(INTERRUPTIONS)],
                                  rng.uniform(*DELAY_S))
                rows.append({**row, "call": merged["calls"]})
                print(f"  trial {i + 1:3d}: {row}", flush=True)
            async with _http() as http, http.get(f"{url}/phone/calls/{caller.stream_sid}") as r:
                stats = (await r.json()).get("stats", {})
        finally:
            await caller.hang_up()
        merged["calls"] += 1
        merged["stats"]["barge_in_clear_ms"] += stats.get("barge_in_clear_ms") or []
        merged["stats"]["barge_in_resumed"] += stats.get("barge_in_resumed") or 0
    return rows, merged


@contextlib.asynccontextmanager
async def _http():
    import aiohttp

    async with aiohttp.ClientSession() as session:
        yield session


def git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True).stdout.strip()


def loadavg() -> list[float]:
    with contextlib.suppress(OSError):
        return [float(x) for x in Path("/proc/loadavg").read_text().split()[:3]]
    return []


def phone_options(raw: str) -> dict[str, Any]:
    """The phone options in force unless ``--set phone.*`` changed them: the defaults with
    ``$CADENCE_PHONE_OPTIONS`` applied, as the server applies it (only for a server started here)."""
    options = PhoneOptions(**(json.loads(raw) if raw else {}))
    return {k: getattr(options, k) for k in ("lead_ms", "barge_in_start_ms", "barge_in_min_level_dbfs",
                                             "barge_in_snr_db", "barge_in_hold_s")}


async def main(args: argparse.Namespace) -> dict[str, Any]:
    load_before, started = loadavg(), time.time()
    if args.url:
        rows, record = await run_call(args.url, args.trials, args.seed, args.turns_per_call)
    else:
        from testkit.servers import cadence_serve

        if args.phone_options:
            os.environ["CADENCE_PHONE_OPTIONS"] = args.phone_options
        with cadence_serve(*args.set) as server:
            rows, record = await run_call(server["url"], args.trials, args.seed, args.turns_per_call)
    counted = [r for r in rows if r["counted"]]
    stats = record.get("stats", {})
    return {
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "commit": git("rev-parse", "--short", "HEAD"),
        "dirty": bool(git("status", "--porcelain", "--untracked-files=no")),
        "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started)),
        "conditions": {
            "server": args.url or "cadence serve (started here)", "set": args.set,
            "phone_options": None if args.url else phone_options(args.phone_options), "cores": len(os.sched_getaffinity(0)),
            "machine": platform.machine(), "python": platform.python_version(),
            "loadavg_before": load_before, "loadavg_after": loadavg(), "seed": args.seed,
            "turns_per_call": args.turns_per_call, "calls": record.get("calls"),
            "delay_s": DELAY_S, "clock": "the caller's (time.monotonic in the client process)",
            "silence": "last voiced bot audio played by the caller's playout-buffer model (clear drops the rest)",
            "percentiles": "nearest rank",
        },
        "trials": len(rows), "counted": len(counted),
        "onset_to_silence_ms": summary([r["onset_to_silence_ms"] for r in counted]),
        "onset_to_clear_ms": summary([r["onset_to_clear_ms"] for r in counted if r["onset_to_clear_ms"] is not None]),
        "no_clear": sum(r["onset_to_clear_ms"] is None for r in counted),
        "server_barge_in_clear_ms": stats.get("barge_in_clear_ms"),
        "server_barge_in_resumed": stats.get("barge_in_resumed"),
        "rows": rows,
    }


def report(out: dict[str, Any]) -> None:
    s, c = out["onset_to_silence_ms"], out["onset_to_clear_ms"]
    print(f"\n{out['counted']} of {out['trials']} barge-ins counted (commit {out['commit']}"
          f"{', dirty' if out['dirty'] else ''})")
    for name, q in (("onset -> silence at the caller", s), ("onset -> clear at the caller  ", c)):
        if q["n"]:
            print(f"{name}: p50 {q['p50']:.0f} ms, p95 {q['p95']:.0f} ms, max {q['max']:.0f} ms (n={q['n']})")
    print(f"no clear in {out['no_clear']} counted trials; load {out['conditions']['loadavg_before']} -> "
          f"{out['conditions']['loadavg_after']} on {out['conditions']['cores']} cores")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trials", type=int, default=30)
    parser.add_argument("--url", help="a running cadence serve (default: start one)")
    parser.add_argument("--set", action="append", default=[], help="config override for the started server")
    parser.add_argument("--phone-options", default="", help='JSON for $CADENCE_PHONE_OPTIONS, e.g. \'{"barge_in_start_ms": 0}\'')
    parser.add_argument("--seed", type=int, default=0, help="for the barge-in delays")
    parser.add_argument("--turns-per-call", type=int, default=1,
                        help="trials per phone call (1: a fresh call each; 40: one long call, as before 2026-12-04)")
    parser.add_argument("--out", default=str(ROOT / "bench/results/barge_in_cpu.json"))
    args = parser.parse_args()
    if args.trials < 1 or args.turns_per_call < 1:
        parser.error("--trials and --turns-per-call must be >= 1")
    result = asyncio.run(main(args))
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2))
    report(result)
    print(f"\nwrote {args.out}")
