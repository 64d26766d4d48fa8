"""Time to first token on the embedded llama.cpp server with and without its prompt-state cache.

llama-cpp-python keeps ONE evaluated state: a request reuses the KV cache only for the token prefix it
shares with the previous request. With ``--cache true`` (``LlamaRAMCache``) it also saves the state after
every request and, before the next, loads the saved state sharing the longest prefix, at the cost of a
save per request. Scenarios, each a sequence of streamed chat requests (a fresh user line each time):

- ``repeat``: one system prompt (Cadence's ``llm.system_prompt``), as one system alone sends;
- ``alternate_systems``: two different system prompts taking turns, as two bots on one server;
- ``alternate_contexts``: the same system prompt, alternating a one-turn context with a three-turn one
  (two systems or two calls whose contexts differ after the system prompt).

Per request: time to the first streamed content token, to the end of the stream (the cache's save
falls there) and the prompt tokens the server evaluated (from its verbose log, ``prompt eval time = ...
/ N tokens``). The two servers (cache off / on) are up together and take requests in turn, so that other
work on the cores falls on both alike.

    python bench/llama_prompt_cache.py --requests 12 --out bench/results/llama_prompt_cache_cpu.json
    python bench/llama_prompt_cache.py --scenarios repeat --busy-cores 1 --threads 1
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agent.config import LLMConfig  # noqa: E402
from agent.llm_server import ManagedLLMServer, free_port, llama_cpp_command  # noqa: E402
from agent.models import smollm2_gguf  # noqa: E402

OTHER_SYSTEM = ("You are a helpful assistant for a small business phone line. Keep every reply short and polite, "
                "say what you can do, and never read out long numbers or web addresses to the caller.")
USER_LINES = ["Thank you.", "Hello?", "Goodbye.", "I would like to speak to an agent.", "Please enter your password.",
              "You are the only person in this conference.", "That number is not in service.",
              "The extension you dialed is invalid.", "Can you tell me the weather tomorrow?",
              "What time do you close today?", "I lost my card, what should I do?", "Is anybody there?"]
HISTORY = [{"role": "user", "content": "Hi, who am I talking to?"},
           {"role": "assistant", "content": "I'm Cadence, a voice assistant. How can I help you today?"}]
PROMPT_EVAL = re.compile(r"prompt eval time =\s*([\d.]+) ms /\s*(\d+) tokens")


def messages(scenario: str, i: int, system: str) -> list[dict[str, str]]:
    user = {"role": "user", "content": USER_LINES[i % len(USER_LINES)]}
    if scenario == "repeat":
        return [{"role": "system", "content": system}, user]
    if scenario == "alternate_systems":
        return [{"role": "system", "content": system if i % 2 == 0 else OTHER_SYSTEM}, user]
    if scenario == "alternate_contexts":
        return [{"role": "system", "content": system}, *(HISTORY if i % 2 else []), user]
    raise ValueError(f"unknown scenario {scenario!r}")


def timed_request(base_url: str, model: str, msgs: list[dict[str, str]], max_tokens: int) -> tuple[float, float]:
    """(ms to the first streamed content token, ms to the end of the stream: includes the cache save)."""
    t0 = time.perf_counter()
    body = {"model": model, "messages": msgs, "max_tokens": max_tokens, "temperature": 0.3, "stream": True}
    first = float("nan")
    with httpx.stream("POST", f"{base_url}/chat/completions", json=body, timeout=60) as r:
        r.raise_for_status()
        for line in r.iter_lines():
            if first != first and line.startswith("data: {") and '"content":' in line:
                delta = json.loads(line[6:])["choices"][0]["delta"]
                if delta.get("content"):
                    first = (time.perf_counter() - t0) * 1000
    return first, (time.perf_counter() - t0) * 1000


def summary(values: list[float]) -> dict[str, float]:
    s = sorted(values)
    return {"n": len(s), "p50": round(statistics.median(s), 1), "max": round(s[-1], 1), "min": round(s[0], 1)}


def rss_mb(pid: int | None) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return round(int(line.split()[1]) / 1024, 1)
    return float("nan")


def start_server(model: Path, cache_mb: int, threads: int, log: Path, threads_batch: int = 0) -> ManagedLLMServer:
    port = free_port()
    cmd = llama_cpp_command(model, port, threads, 2048)
    if threads_batch:  # prompt evaluation's threads; llama_cpp.server's default is every core
        cmd += ["--n_threads_batch", str(threads_batch)]
    if cache_mb:
        cmd += ["--cache", "true", "--cache_type", "ram", "--cache_size", str(cache_mb << 20)]
    return ManagedLLMServer(cmd, port, 60.0, log).start()


def run_scenario(model: Path, cache_mb: int, scenario: str, requests: int, threads: int, max_tokens: int,
                 system: str, threads_batch: int = 0) -> list[dict[str, Any]]:
    """One server without and one with the cache, up together, requests interleaved (alternating which goes
    first) so that other work on the cores falls on both alike."""
    with tempfile.TemporaryDirectory() as tmp:
        logs = {mb: Path(tmp) / f"server{mb}.log" for mb in (0, cache_mb)}
        servers = {mb: start_server(model, mb, threads, logs[mb], threads_batch) for mb in (0, cache_mb)}
        times: dict[int, list[tuple[float, float]]] = {0: [], cache_mb: []}
        try:
            for s in servers.values():
                timed_request(s.base_url, s.model_id, messages(scenario, 99, system), 2)  # warm-up
            for i in range(requests):
                for mb in ((0, cache_mb) if i % 2 == 0 else (cache_mb, 0)):
                    s = servers[mb]
                    times[mb].append(timed_request(s.base_url, s.model_id, messages(scenario, i, system), max_tokens))
            rss = {mb: rss_mb(s.pid) for mb, s in servers.items()}
        finally:
            for s in servers.values():
                s.stop()
        rows = []
        for mb in (0, cache_mb):
            ttft, total = [t for t, _ in times[mb]], [t for _, t in times[mb]]
            evals = [(float(ms), int(n)) for ms, n in PROMPT_EVAL.findall(logs[mb].read_text(errors="replace"))][1:]
            rows.append({"cache_mb": mb, "scenario": scenario, "ttft_ms": [round(v, 1) for v in ttft],
                         "total_ms": [round(v, 1) for v in total], "server_rss_mb_after": rss[mb],
                         "ttft": summary(ttft[1:]),  # the first request follows the warm-up's different prompt
                         "total": summary(total[1:]),
                         "prompt_tokens_evaluated": [n for _, n in evals], "prompt_eval_ms": [ms for ms, _ in evals],
                         # what is not prompt evaluation: state load (cache hits), sampling, HTTP
                         "ttft_minus_prompt_eval_ms": [round(t - ms, 1) for t, (ms, _) in zip(ttft, evals, strict=False)]})
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=12)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--threads-batch", type=int, default=0, help="--n_threads_batch (0: the server's default, all cores)")
    ap.add_argument("--max-tokens", type=int, default=8)
    ap.add_argument("--cache-mb", type=int, default=64, help="prompt cache size for the cached server")
    ap.add_argument("--scenarios", default="repeat,alternate_systems,alternate_contexts")
    ap.add_argument("--busy-cores", type=int, default=0,
                    help="busy-loop processes kept spinning during the run (CPU contention)")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    if args.requests < 2 or args.cache_mb < 1:
        ap.error("--requests must be >= 2 and --cache-mb >= 1")
    model, system = smollm2_gguf(), LLMConfig().system_prompt
    t0 = time.time()
    load_before = os.getloadavg()
    spin = "import os\np = os.getppid()\nwhile os.getppid() == p: pass"  # ends with this process
    busy = [subprocess.Popen([sys.executable, "-c", spin]) for _ in range(args.busy_cores)]
    rows: list[dict[str, Any]] = []
    try:
        for scenario in args.scenarios.split(","):
            for row in run_scenario(model, args.cache_mb, scenario, args.requests, args.threads, args.max_tokens,
                                    system, args.threads_batch):
                rows.append(row)
                print(f"{scenario:20s} cache={row['cache_mb']:4d} MB  TTFT p50 {row['ttft']['p50']:7.1f} max "
                      f"{row['ttft']['max']:7.1f} ms  request p50 {row['total']['p50']:6.1f} ms  "
                      f"RSS {row['server_rss_mb_after']:6.1f} MB  evaluated {row['prompt_tokens_evaluated']}",
                      flush=True)
    finally:
        for proc in busy:
            proc.kill()
            proc.wait()
    print("\nscenario              TTFT p50/max ms   off      |  cache")
    for off, on in zip(rows[::2], rows[1::2], strict=True):
        print(f"{off['scenario']:20s}  {off['ttft']['p50']:7.1f} / {off['ttft']['max']:7.1f}  |  "
              f"{on['ttft']['p50']:7.1f} / {on['ttft']['max']:7.1f}")
    if args.out:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
        result = {"command": "python " + " ".join(sys.argv), "commit": commit,
                  "machine": f"{platform.machine()} cores={os.cpu_count()}",
                  "conditions": {"model": model.name, "threads": args.threads, "threads_batch": args.threads_batch or "server default (cpu_count)", "max_tokens": args.max_tokens,
                                 "requests_per_case": args.requests,
                                 "busy_loop_processes": args.busy_cores, "clock": "POST -> first streamed content token",
                                 "load_average_before": [round(v, 2) for v in load_before],
                                 "load_average_after": [round(v, 2) for v in os.getloadavg()],
                                 "shared_cores": "the 2 cores were shared with other work"},
                 "wall_s": round(time.time() - t0, 1), "rows": rows}
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
