"""The LLM alone: time to first token at 1..N concurrent streamed chats, on the server Cadence launches.

The server is started exactly as ``cadence serve`` starts it for the given config (``llm.server``:
transformers serve or vLLM, pinned to ``gpu.device``, sized to ``gpu.llm_fraction``), warmed with
one request, then each level sends N chats at once (a voice agent's system prompt plus a caller's
sentence; replies capped at ``--max-tokens``) and records per chat the time to the first content
token and to the last. The server's GPU memory (NVML) is read after the last level.

    python bench/llm_alone.py --config examples/gpu.toml --levels 1,8,32,64,128,256 --out llm_alone.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agent.config import load_config  # noqa: E402
from agent.gpu_memory import (  # noqa: E402
    GIB,
    check_llm_server,
    llm_server_kind,
    managed_llm_server,
    plan_for,
    process_gpu_memory,
    read_device_memory,
)

CALLER_WORDS = ["what", "time", "do", "you", "open", "tomorrow", "morning", "and", "can", "you", "tell", "me", "about", "the", "weather", "in", "the", "city", "please", "help", "me", "find", "a", "good", "book", "to", "read", "tonight"]


def pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    k = (len(ordered) - 1) * q / 100.0
    lo, hi = int(k), min(int(k) + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


async def chat(http, url: str, model: str, system: str, i: int, max_tokens: int, temperature: float) -> dict:
    words = [CALLER_WORDS[(i * 7 + j) % len(CALLER_WORDS)] for j in range(12)]
    body = {"model": model, "stream": True, "max_tokens": max_tokens, "temperature": temperature,
            "messages": [{"role": "system", "content": system}, {"role": "user", "content": " ".join(words)}]}
    t0 = time.perf_counter()
    first, chunks, text = None, 0, ""
    try:
        async with http.stream("POST", f"{url}/chat/completions", json=body, timeout=120.0) as r:
            r.raise_for_status()
            async for line in r.aiter_lines():
                if not line.startswith("data:") or line.strip() == "data: [DONE]":
                    continue
                delta = json.loads(line[5:])["choices"][0].get("delta", {}).get("content")
                if delta:
                    first = first or time.perf_counter()
                    chunks += 1
                    text += delta
    except Exception as exc:  # a failed chat is counted, not fatal
        return {"ok": False, "error": repr(exc)[:200]}
    end = time.perf_counter()
    return {"ok": first is not None, "ttft_ms": None if first is None else (first - t0) * 1000.0,
            "total_s": end - t0, "chunks": chunks, "words": len(text.split()),
            "itl_ms": None if first is None or chunks < 2 else (end - first) * 1000.0 / (chunks - 1)}


async def level(url: str, model: str, system: str, n: int, max_tokens: int, temperature: float) -> dict:
    import httpx

    limits = httpx.Limits(max_connections=n + 8, max_keepalive_connections=n + 8)
    async with httpx.AsyncClient(limits=limits) as http:
        t0 = time.perf_counter()
        results = await asyncio.gather(*(chat(http, url, model, system, i, max_tokens, temperature)
                                         for i in range(n)))
        wall = time.perf_counter() - t0
    ok = [r for r in results if r["ok"]]
    ttft = [r["ttft_ms"] for r in ok]
    totals = [r["total_s"] for r in ok]
    words = sum(r["words"] for r in ok)
    itl = [r["itl_ms"] for r in ok if r["itl_ms"] is not None]
    row = {"chats": n, "ok": len(ok), "ttft_p50_ms": pct(ttft, 50), "ttft_p99_ms": pct(ttft, 99),
           "ttft_max_ms": max(ttft) if ttft else None,
           "inter_token_p50_ms": pct(itl, 50), "inter_token_p99_ms": pct(itl, 99), "reply_p50_s": pct(totals, 50), "reply_p99_s": pct(totals, 99),
           "words_p50": statistics.median([r["words"] for r in ok]) if ok else None,
           "words_per_s": words / wall if wall > 0 else None, "wall_s": wall,
           "errors": sorted({r.get("error", "no content") for r in results if not r["ok"]})[:3]}
    print(f"chats {n:4d}: ttft p50 {row['ttft_p50_ms'] or 0:7.0f} ms p99 {row['ttft_p99_ms'] or 0:7.0f} ms; between tokens p50 "
          f"{row['inter_token_p50_ms'] or 0:5.1f} ms; reply p50 "
          f"{row['reply_p50_s'] or 0:5.2f} s; {row['words_p50']} words; {row['words_per_s'] or 0:7.0f} words/s; "
          f"ok {len(ok)}/{n}", flush=True)
    return row


async def main_async(args: argparse.Namespace) -> dict:
    cfg = load_config(args.config, args.set)
    device = read_device_memory(cfg.gpu.device)
    plan = plan_for(cfg, device)
    server = managed_llm_server(plan, cfg, device, log_path=args.server_log)
    t0 = time.perf_counter()
    await server.astart()
    start_s = time.perf_counter() - t0
    kind = llm_server_kind(cfg)
    try:
        warm = await asyncio.to_thread(check_llm_server, server.base_url, server.model_id, 300.0, kind,
                                       cfg.llm.temperature)
        levels = [await level(server.base_url, server.model_id, cfg.llm.system_prompt, n, args.max_tokens,
                              cfg.llm.temperature) for n in args.levels]
        used = process_gpu_memory(server.pid, cfg.gpu.device) if server.pid else None
    finally:
        server.stop()
    return {"server": kind, "model": server.model_id, "command": server.command, "start_s": start_s,
            "first_request_ms": warm.first_token_ms, "max_tokens": args.max_tokens,
            "temperature": cfg.llm.temperature,
            "llm_share_gib": plan.share("llm").bytes / GIB if plan else None,
            "server_gpu_gib": None if used is None else used / GIB, "levels": levels}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default="examples/gpu.toml")
    parser.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE")
    parser.add_argument("--levels", default="1,8,32,64,128,256")
    parser.add_argument("--max-tokens", type=int, default=48)
    parser.add_argument("--server-log", type=Path)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    args.levels = [int(x) for x in args.levels.split(",") if x.strip()]
    result = asyncio.run(main_async(args))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=1))
    print(json.dumps({k: v for k, v in result.items() if k != "levels"}), flush=True)


if __name__ == "__main__":
    main()
