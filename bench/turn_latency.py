"""End of speech -> first bot audio over many real recorded turns, on the embedded CPU default.

Plays Asterisk prompts (real speech) one turn at a time through the full cascade (VAD, smart
turn, Whisper, llama.cpp, Piper) in real time, as ``cadence talk`` does, and prints per-stage
p50/max plus peak memory. Writes JSON under bench/results/.

    python bench/turn_latency.py --turns 12
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from agent.config import load_config  # noqa: E402
from agent.llm_server import embedded_llama_server  # noqa: E402
from agent.pipeline import Engines  # noqa: E402
from agent.talk import talk  # noqa: E402
from testkit.corpus import prompts, wer  # noqa: E402
from transports.audio_io import load_audio  # noqa: E402

PROMPTS = ["agent-pass", "auth-incorrect", "conf-getpin", "pbx-invalid", "vm-enter-num-to-call",
           "privacy-unident", "conf-onlyperson", "queue-thankyou", "conf-getconfno", "all-circuits-busy-now",
           "check-number-dial-again", "conf-invalidpin", "cannot-complete-as-dialed", "conf-locked"]


def rss_mb(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return float("nan")


async def main(args: argparse.Namespace) -> dict:
    config = load_config(args.config, args.set)
    available = {p.name: p for p in prompts(min_words=3, max_words=30)}
    chosen = [available[n] for n in PROMPTS if n in available][: args.turns]
    audio = [load_audio(p.path, 16000) for p in chosen]
    server = embedded_llama_server(config.llm.threads, config.llm.context_size)
    await server.astart()
    try:
        engines = await asyncio.to_thread(Engines.load, config, server.base_url, server.model_id)
        warm = await talk(engines, audio[:1])  # one warm-up turn, as the peer did
        del warm
        t0 = time.monotonic()
        turns = []
        for utterance in audio:  # one session per turn: context cleared between turns, as the peer did
            turns += (await talk(engines, [utterance])).turns
        wall = time.monotonic() - t0
        llm_peak = rss_mb(server.process.pid) if server.process else float("nan")
    finally:
        server.stop()
    rows = []
    for prompt, turn in zip(chosen, turns, strict=True):
        rows.append(
            {
                "prompt": prompt.name,
                "text": prompt.text,
                "heard": turn.transcript,
                "reply": turn.reply,
                "wer": wer(prompt.text, turn.transcript),
                "stages_ms": turn.stages_ms,
                "answered": bool(turn.reply_audio),
            }
        )
    stage_names = [
        "eos_to_transcript",
        "eos_to_llm_first_token",
        "eos_to_first_audio",
        "transcript_to_llm_first_token",
        "llm_first_token_to_tts_first_audio",
    ]
    summary = {}
    for name in stage_names:
        values = [r["stages_ms"][name] for r in rows if name in r["stages_ms"]]
        if values:
            summary[name] = {
                "p50": float(np.percentile(values, 50)),
                "max": float(np.max(values)),
                "n": len(values),
            }
    own_peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    out = {
        "command": " ".join(sys.argv),
        "machine": f"{platform.machine()} {platform.processor() or ''} cores={len(__import__('os').sched_getaffinity(0))}",
        "commit": subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
        ).stdout.strip(),
        "turns": len(rows),
        "answered": sum(r["answered"] for r in rows),
        "mean_wer": float(np.mean([r["wer"] for r in rows])) if rows else None,
        "summary_ms": summary,
        "peak_memory_mb": {"pipeline": own_peak, "llm_server": llm_peak, "total": own_peak + llm_peak},
        "wall_s": wall,
        "rows": rows,
    }
    return out


def report(out: dict) -> None:
    print(f"\n{out['turns']} turns, {out['answered']} answered, mean WER {out['mean_wer']:.3f}")
    print(f"{'stage (ms)':40s} {'p50':>8s} {'max':>8s}")
    for name, s in out["summary_ms"].items():
        print(f"{name:40s} {s['p50']:8.0f} {s['max']:8.0f}")
    peer = {
        "eos_to_first_audio": (1070, 4200),
        "eos_to_transcript": (510, 710),
        "eos_to_llm_first_token": (765, 3200),
    }
    print("\nside by side with stock pipecat (PEER.md, same models, same machine size):")
    for name, (p50, mx) in peer.items():
        s = out["summary_ms"].get(name)
        if s:
            print(
                f"  {name:28s} p50 {s['p50']:6.0f} vs {p50:5d} ms ({p50 / s['p50']:.2f}x)   "
                f"max {s['max']:6.0f} vs {mx:5d} ms ({mx / s['max']:.2f}x)"
            )
    m = out["peak_memory_mb"]
    print(
        f"peak memory: pipeline {m['pipeline']:.0f} MB + LLM server {m['llm_server']:.0f} MB = {m['total']:.0f} MB"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--turns", type=int, default=12)
    parser.add_argument("--config")
    parser.add_argument("--set", action="append", default=[])
    parser.add_argument("--out", default=str(ROOT / "bench/results/turn_latency_cpu.json"))
    args = parser.parse_args()
    from agent.cli import setup_logging

    setup_logging("WARNING")
    result = asyncio.run(main(args))
    Path(args.out).write_text(json.dumps(result, indent=2))
    report(result)
    print(f"\nwrote {args.out}")
