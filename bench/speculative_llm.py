"""End of speech -> LLM first token with and without speculative LLM requests (agent/speculative_turn.py).

Every mode hears the same recorded prompts (Debian's Asterisk prompts, 8 kHz upsampled to 16 kHz) through
Cadence's own pipeline (``agent.pipeline.build_worker`` on a file transport, played in real time), one turn
per session, with streaming Parakeet (``asr.engine = "parakeet"``; without ``asr.model`` the tiny random
checkpoint: its transcripts are nonsense, its timing and partial cadence are the real code's) and the
embedded llama.cpp server. Modes (``llm.speculate`` values) alternate per prompt (rotated order).

The clock starts at the caller's last voiced sample (energy threshold, as ``bench/turn_latency.py``) and
stops at the first ``LLMTextFrame`` past the LLM stage (a speculative reply's held tokens count from their
release at the turn end). Per mode: the latency distribution, the hit rate (turns answered by a
speculative request), the speculative requests started and wasted (withdrawn: the request was made and
thrown away), and the chat requests the server answered.

    python bench/speculative_llm.py --turns 16
    python bench/speculative_llm.py --modes ",final,pause,final+pause" --set vad.turn=silence
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from agent.config import load_config  # noqa: E402
from agent.llm_server import embedded_llama_server  # noqa: E402
from agent.pipeline import Engines, build_worker  # noqa: E402
from agent.turn_observer import TurnObserver  # noqa: E402
from bench.turn_latency import chosen_prompts, last_voiced_s, padded_s, summarize  # noqa: E402
from testkit.corpus import prompts  # noqa: E402
from transports.audio_io import load_audio  # noqa: E402
from transports.file_transport import CallScript, FileTransport, run_until_script_done  # noqa: E402
from transports.webrtc import transport_params  # noqa: E402

RATE = 16000


def mode_value(mode: str) -> str:
    """``final+pause`` (a shell-friendly spelling) -> ``final,pause``; ``off`` -> ``""``."""
    return "" if mode in ("", "off") else mode.replace("+", ",")


async def one_turn(engines: Engines, utterance: np.ndarray, speculate: str, max_wait_s: float = 15.0) -> dict:
    """One caller turn; returns the LLM's first-token time and the speculation counters it moved."""
    engines.config.llm.speculate = speculate
    stats = engines.speculation_stats
    before = stats.snapshot()
    cfg = engines.config
    script = CallScript([utterance], max_wait_s=max_wait_s)
    transport = FileTransport(transport_params(cfg.audio.in_sample_rate, cfg.audio.out_sample_rate), script)
    observer = TurnObserver()
    worker = build_worker(engines, transport, observers=[observer])

    async def done_at_first_token() -> None:  # the reply's audio is not what is measured: end the call
        while not (observer.turns and observer.turns[-1].llm_first_token is not None):
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.3)
        script.turn_done.set()

    waiter = asyncio.create_task(done_at_first_token())
    try:
        await run_until_script_done(worker, script)
    finally:
        waiter.cancel()
    after = stats.snapshot()
    timing = observer.turns[-1] if observer.turns else None
    eos = None
    if script.speech_end_times:
        eos = script.speech_end_times[0] - (padded_s(utterance) - last_voiced_s(utterance))
    first = None if timing is None else timing.llm_first_token
    turn_end = None if timing is None else timing.turn_end
    started = {k: v - before["started"].get(k, 0) for k, v in after["started"].items()}
    withdrawn = {k: v - before["withdrawn"].get(k, 0) for k, v in after["withdrawn"].items()}
    return {
        "heard": timing.transcript_text if timing else "",
        "eos_to_llm_first_token_ms": None if first is None or eos is None else (first - eos) * 1000.0,
        # the turn detector's decision -> first token: the LLM's time to first token, less what a speculative
        # request started before the decision hid of it (its held tokens go out at the decision)
        "turn_end_to_llm_first_token_ms": None if first is None or turn_end is None else (first - turn_end) * 1000.0,
        "eos_to_turn_end_ms": None if turn_end is None or eos is None else (turn_end - eos) * 1000.0,
        "stages_ms": timing.stages_ms(end_of_speech=eos) if timing and eos is not None else {},
        "started": {k: v for k, v in started.items() if v},
        "withdrawn": {k: v for k, v in withdrawn.items() if v},
        "confirmed": after["confirmed"] - before["confirmed"],
    }


def server_requests(log: Path) -> int:
    return log.read_text(errors="replace").count('"POST /v1/chat/completions HTTP/1.1" 200')


async def main(args: argparse.Namespace) -> dict:
    config = load_config(args.config, ["asr.engine=parakeet", *args.set])
    modes = [m.strip() for m in args.modes.split(",")]
    chosen = chosen_prompts(args.turns)
    audio = [load_audio(p.path, RATE) for p in chosen]
    warm = load_audio(next(p for p in prompts() if p.name == args.warmup).path, RATE)
    log = Path(args.server_log)
    log.write_text("")
    server = embedded_llama_server(config.llm.threads, config.llm.context_size, log_path=log)
    await server.astart()
    rows: list[dict[str, Any]] = []
    requests: dict[str, int] = dict.fromkeys(modes, 0)
    try:
        engines = await asyncio.to_thread(Engines.load, config, server.base_url, server.model_id)
        for mode in modes:  # one discarded warm-up turn per mode
            await one_turn(engines, warm, mode_value(mode))
        t0 = time.monotonic()
        for k, (prompt, utterance) in enumerate(zip(chosen, audio, strict=True)):
            row: dict[str, Any] = {"prompt": prompt.name, "text": prompt.text}
            for j in range(len(modes)):
                mode = modes[(j + k) % len(modes)]
                n0 = server_requests(log)
                row[mode] = await one_turn(engines, utterance, mode_value(mode))
                await asyncio.sleep(0.3)  # the access log line of a cancelled stream lands late
                row[mode]["server_requests"] = server_requests(log) - n0
                requests[mode] += row[mode]["server_requests"]
            rows.append(row)
            cells = "  ".join(f"{m or 'off'} {_ms(row[m]['eos_to_llm_first_token_ms'])}" for m in modes)
            print(f"{prompt.name:28s} {cells}", flush=True)
        wall = time.monotonic() - t0
    finally:
        server.stop()
    summary = {}
    for mode in modes:
        turns = [r[mode] for r in rows]
        lat = [t["eos_to_llm_first_token_ms"] for t in turns if t["eos_to_llm_first_token_ms"] is not None]
        started = sum(sum(t["started"].values()) for t in turns)
        after_end = [t["turn_end_to_llm_first_token_ms"] for t in turns if t["turn_end_to_llm_first_token_ms"] is not None]
        ends = [t["eos_to_turn_end_ms"] for t in turns if t["eos_to_turn_end_ms"] is not None]
        summary[mode or "off"] = {
            "eos_to_llm_first_token_ms": {**summarize(lat), "mean": float(np.mean(lat)) if lat else None},
            "turn_end_to_llm_first_token_ms": {**summarize(after_end),
                                               "mean": float(np.mean(after_end)) if after_end else None},
            "eos_to_turn_end_ms": summarize(ends),
            "turns": len(turns),
            "answered": len(lat),
            "hits": sum(t["confirmed"] for t in turns),
            "hit_rate": sum(t["confirmed"] for t in turns) / len(turns) if turns else None,
            "speculative_requests": started,
            "wasted_requests": sum(sum(t["withdrawn"].values()) for t in turns),
            "withdrawn_by_reason": _sum_dicts(t["withdrawn"] for t in turns),
            "started_by_trigger": _sum_dicts(t["started"] for t in turns),
            "server_requests": requests[mode],
        }
    return {
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "machine": f"{platform.machine()} cores={len(os.sched_getaffinity(0))}",
        "cpu_load_note": args.note,
        "commit": subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                                 text=True).stdout.strip(),
        "config": {"asr": {"engine": config.asr.engine, "model": config.asr.model or "tiny random",
                           "partial_interval_ms": config.asr.partial_interval_ms},
                   "vad": {"turn": config.vad.turn, "stop_secs": config.vad.stop_secs,
                           "turn_fallback_secs": config.vad.turn_fallback_secs},
                   "llm": {"max_tokens": config.llm.max_tokens, "threads": config.llm.threads,
                           "speculate_stable_ms": config.llm.speculate_stable_ms}},
        "turns_per_mode": len(rows), "modes": summary, "wall_s": wall, "rows": rows,
    }


def _sum_dicts(items) -> dict[str, int]:
    out: dict[str, int] = {}
    for d in items:
        for k, v in d.items():
            out[k] = out.get(k, 0) + v
    return out


def _ms(value: float | None) -> str:
    return f"{value:6.0f} ms" if value is not None else "  none   "


def report(out: dict) -> None:
    print(f"\n{out['turns_per_mode']} turns per mode; end of speech -> LLM first token (ms)")
    print(f"{'mode':14s} {'p50':>6s} {'p90':>6s} {'mean':>6s} {'end->tok':>8s} {'hit rate':>9s} {'spec req':>9s} "
          f"{'wasted':>7s} {'server':>7s}")
    for name, s in out["modes"].items():
        lat = s["eos_to_llm_first_token_ms"]
        cells = " ".join(f"{lat[k]:6.0f}" if lat.get(k) is not None else f"{'-':>6s}" for k in ("p50", "p90", "mean"))
        after = s["turn_end_to_llm_first_token_ms"].get("p50")
        after_cell = f"{after:8.0f}" if after is not None else f"{'-':>8s}"
        print(f"{name:14s} {cells} {after_cell} {s['hit_rate']:9.2f} {s['speculative_requests']:9d} "
              f"{s['wasted_requests']:7d} {s['server_requests']:7d}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--turns", type=int, default=16, help="prompts, spread over all of them (0: every prompt)")
    parser.add_argument("--modes", default="off,final,pause,final+pause,stable+final+pause",
                        help="llm.speculate values, comma-separated ('+' joins triggers; 'off': none)")
    parser.add_argument("--warmup", default="vm-goodbye", help="prompt for the discarded first turn of each mode")
    parser.add_argument("--config")
    parser.add_argument("--set", action="append", default=[])
    parser.add_argument("--note", default="2 shared cores; other jobs ran on them at the same time",
                        help="what else loaded the CPU (goes into the JSON)")
    parser.add_argument("--server-log", default="/tmp/speculative_llm_server.log")
    parser.add_argument("--out", default=str(ROOT / "bench/results/speculative_llm_cpu.json"))
    args = parser.parse_args()
    from agent.cli import setup_logging

    setup_logging("WARNING")
    result = asyncio.run(main(args))
    Path(args.out).write_text(json.dumps(result, indent=2))
    report(result)
    print(f"\nwrote {args.out}")
