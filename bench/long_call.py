"""A long synthetic call on the embedded stack: does the context stay inside the window, and what do
turns cost when trimming kicks in?

    python bench/long_call.py --minutes 30 --max-tokens 64 --out bench/results/long_call.json

Same driver as ``tests/bot/test_long_call.py`` (``testkit.long_call``: pipecat's aggregators and
``CadenceLLMService`` against the real llama.cpp server), with real-length replies by default.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
from pathlib import Path

from agent.llm_server import embedded_llama_server
from testkit.long_call import run_long_call


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else 0.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--context-size", type=int, default=2048)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    with embedded_llama_server(threads=args.threads, context_size=args.context_size, api_key="bench") as server:
        report = asyncio.run(run_long_call(server.base_url, server.model_id, minutes=args.minutes,
                                           max_tokens=args.max_tokens, context_size=args.context_size,
                                           api_key="bench"))
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    summary = {
        "commit": commit, "minutes": args.minutes, "max_tokens": args.max_tokens, "context_size": args.context_size,
        "turns": report.turns, "simulated_min": round(report.simulated_s / 60, 1), "wall_s": round(report.wall_s, 1),
        "errors": report.errors, "apologies": report.apologies, "empty_replies": report.empty_replies,
        "trims": report.trims, "max_sent_tokens_est": report.max_estimate_tokens,
        "untrimmed_tokens_est": report.untrimmed_estimate_tokens,
        "turn_s_p50": round(percentile(report.turn_s, 0.5), 3), "turn_s_p95": round(percentile(report.turn_s, 0.95), 3),
        "turn_s_max": round(max(report.turn_s, default=0.0), 3),
    }
    print(json.dumps(summary, indent=2))
    if args.out:
        args.out.write_text(json.dumps(summary, indent=2) + "\n")


if __name__ == "__main__":
    main()
