"""Throughput of ``POST /v1/audio/transcriptions``: audio seconds per wall second against
concurrency and clip length, p50/p90 latency, and cost per audio hour at a stated price.

A real server runs in a child process (this file with ``--serve``: only ``asr.offline`` and the
engine are imported, no pipecat on the Parakeet path); closed-loop clients keep ``C`` requests
in flight with aiohttp, each a WAV upload in one request. Speech is real (Debian's Asterisk
prompts strung together) where installed, speech-like synthetic audio otherwise.

CPU, embedded Whisper:   python bench/transcribe_server.py
GPU, Parakeet (H200):    python bench/transcribe_server.py --engine parakeet --device cuda --dtype bfloat16 \\
                             --model CHECKPOINT_DIR --plan "10:1,16,64;300:1,16,64;3600:1,8" --price 3.50
``--model random-v3`` builds the 0.6B v3 architecture with random weights biased to emit like
speech (``asr.parakeet.random_v3``), for GPUs without a checkpoint. ``--parakeet-backend`` picks the
profiled GPU encoder (``fast``, the default on CUDA; ``--profiles`` sets its shapes) or the
general engine (``general``). ``bench/gpu_issue6.sh`` is the H200 run.
The server runs with ``cadence transcribe-server``'s defaults: the
default admission limits (``--max-inflight``, ``--max-audio-held-s`` raise them for big plans).
``--plan`` is ``clip_seconds:concurrency,...`` groups separated by ``;``; ``--price`` is the
machine's price in USD per hour (defaults: $0.085 for a 2-vCPU cloud VM, $3.50 for one H200).
"""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import math
import os
import re
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

DEFAULT_PLAN = "10:1,2,4,8;300:1,4,8"
PRICES = {"cpu": 0.085, "cuda": 3.50}


class _NumberedTokenizer:
    """Token ids as made-up words (every third token starts a word): for random-weight models."""

    def piece(self, token_id: int) -> str:
        return ("\u2581" if token_id % 3 == 0 else "") + f"t{token_id}"

    def decode(self, ids: list[int]) -> str:
        return "".join(self.piece(i) for i in ids).replace("\u2581", " ").strip()


def random_v3_engine(spec: Any) -> Any:
    """Parakeet-TDT 0.6B v3's architecture with random weights, emitting ~0.3 tokens per frame
    (``asr.parakeet.random_v3``): the GPU cost of the real model without its checkpoint (CUDA only)."""
    from asr.offline.parakeet_engine import ParakeetWindowEngine
    from asr.offline.plan import PlanOptions
    from asr.offline.window_engine import parakeet_backend
    from asr.parakeet.engine import ParakeetEngine
    from asr.parakeet.features import FeatureConfig
    from asr.parakeet.loading import ParakeetCheckpoint, parse_dtype
    from asr.parakeet.random_v3 import calibrated_model

    t0 = time.perf_counter()
    model, info = calibrated_model()
    print(f"random v3 calibrated in {time.perf_counter() - t0:.1f} s: {info}", flush=True)
    ckpt = ParakeetCheckpoint(model=model, tokenizer=_NumberedTokenizer(), features=FeatureConfig(), source="random-v3")
    max_batch = spec.max_batch or 64
    if parakeet_backend(spec) == "fast":
        from asr.offline.parakeet_fast import (
            FastParakeetWindowEngine,
            default_profiles,
            make_transcriber,
            plan_for,
        )

        t0 = time.perf_counter()
        transcriber = make_transcriber(model, spec.profiles or default_profiles(max_batch), spec.device,
                                       parse_dtype(spec.dtype))
        fast = FastParakeetWindowEngine(transcriber, ckpt.tokenizer, ckpt.frame_seconds, "parakeet-random-v3",
                                        max_batch, plan_for(transcriber.profiles, spec.max_window_s))
        fast.warmup(full=spec.device.startswith("cuda"))
        print(f"fast backend: {len(transcriber.profiles)} profiles built in {time.perf_counter() - t0:.1f} s",
              flush=True)
        return fast
    engine = ParakeetEngine(ckpt, device=spec.device, dtype=spec.dtype, encoder_backend=spec.encoder_backend)
    engine.warmup()
    return ParakeetWindowEngine(engine, "parakeet-random-v3", max_batch, PlanOptions())


def serve_main(args: argparse.Namespace) -> None:
    """Child process: build the engine, serve, print the URL."""
    from agent.models import resolve_engine_spec
    from asr.offline.engine_factory import make_engine
    from asr.offline.server import ServerOptions, serve
    from asr.offline.transcriber import OfflineTranscriber
    from asr.offline.window_engine import EngineSpec

    spec = EngineSpec(engine=args.engine, model=args.model, device=args.device, max_batch=args.max_batch,
                      dtype=args.dtype, encoder_backend=args.encoder_backend,
                      parakeet_backend=args.parakeet_backend, profiles=args.profiles)
    engine = random_v3_engine(spec) if args.model == "random-v3" else make_engine(resolve_engine_spec(spec))
    options = ServerOptions(max_inflight=args.max_inflight, max_audio_held_s=args.max_audio_held_s)
    asyncio.run(serve(OfflineTranscriber(engine, args.max_batch or None), "127.0.0.1", 0, options,
                      lambda url: print(f"READY {url} {engine.name}", flush=True)))


def speech(seconds: float, seed: int) -> np.ndarray:
    try:
        from testkit.corpus import SOUNDS  # needs pytest
    except ImportError:
        SOUNDS = Path("/nonexistent")
    if SOUNDS.is_dir():
        from testkit.offline_audio import speech_track

        return speech_track(seconds, seed=seed)[0]
    # No Asterisk prompts here (the GPU machine): speech-like harmonics with pauses in room tone.
    n = int(seconds * 16000)
    if seconds > 300:  # long clips repeat 5 minutes (the model's cost does not depend on the words)
        return np.resize(speech(300, seed), n)
    rng = np.random.default_rng(seed)
    t = np.arange(n) / 16000
    f0 = 100 + 80 * rng.random()
    voiced = (np.sin(2 * np.pi * 0.4 * t + rng.random() * 6) > -0.3).astype(np.float32)
    sig = sum(np.sin(2 * np.pi * f0 * k * t) / k for k in range(1, 6)) * (0.5 + 0.5 * np.sin(2 * np.pi * 4 * t))
    return (0.1 * voiced * sig + 0.001 * rng.standard_normal(n)).astype(np.float32)


def wav_bytes(audio: np.ndarray) -> bytes:
    import wave

    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(16000)
        w.writeframes((np.clip(audio, -1, 1) * 32767).astype("<i2").tobytes())
    return buf.getvalue()


def start_server(args: argparse.Namespace) -> tuple[subprocess.Popen[str], str, str]:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--serve", "--engine", args.engine, "--device",
           args.device, "--model", args.model, "--max-batch", str(args.max_batch), "--dtype", args.dtype,
           "--encoder-backend", args.encoder_backend, "--parakeet-backend", args.parakeet_backend,
           "--profiles", args.profiles, "--max-inflight", str(args.max_inflight),
           "--max-audio-held-s", str(args.max_audio_held_s)]
    env = dict(os.environ, HF_HUB_OFFLINE="1", PYTHONUNBUFFERED="1")
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert proc.stdout is not None
    lines = []
    for line in proc.stdout:
        lines.append(line)
        m = re.match(r"READY (\S+) (\S+)", line)
        if m:
            threading.Thread(target=lambda: [None for _ in proc.stdout], daemon=True).start()  # type: ignore[union-attr]
            return proc, m.group(1), m.group(2)
    raise RuntimeError("server did not start:\n" + "".join(lines[-40:]))


async def run_level(url: str, model: str, clips: list[bytes], clip_s: float, concurrency: int,
                    requests: int) -> dict[str, Any]:
    import aiohttp

    latencies: list[float] = []
    server: list[dict[str, Any]] = []
    queue: asyncio.Queue[int] = asyncio.Queue()
    for i in range(requests):
        queue.put_nowait(i)
    timeout = aiohttp.ClientTimeout(total=3600)
    async with aiohttp.ClientSession(timeout=timeout) as session:

        async def worker() -> None:
            while not queue.empty():
                i = queue.get_nowait()
                form = aiohttp.FormData()
                form.add_field("file", clips[i % len(clips)], filename=f"clip{i}.wav", content_type="audio/wav")
                form.add_field("model", model)
                t0 = time.perf_counter()
                async with session.post(f"{url}/v1/audio/transcriptions", data=form) as resp:
                    body = await resp.text()
                    if resp.status != 200:
                        raise RuntimeError(f"HTTP {resp.status}: {body[:300]}")
                    server.append(json.loads(resp.headers["x-cadence-timings"]))
                latencies.append(time.perf_counter() - t0)

        async with session.get(f"{url}/health") as r:
            before = await r.json()
        t0 = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        wall = time.perf_counter() - t0
        async with session.get(f"{url}/health") as r:
            after = await r.json()
    batches = after["batches"] - before["batches"]
    windows = after["windows"] - before["windows"]
    lat = sorted(latencies)
    return {
        "clip_s": clip_s, "concurrency": concurrency, "requests": requests, "wall_s": round(wall, 2),
        "audio_s_per_wall_s": round(requests * clip_s / wall, 2),
        "latency_p50_s": round(statistics.median(lat), 3), "latency_p90_s": round(lat[math.ceil(0.9 * len(lat)) - 1], 3),
        "decode_s_mean": round(statistics.fmean(s["decode_s"] for s in server), 4),
        "asr_s_mean": round(statistics.fmean(s["asr_s"] for s in server), 3),
        "windows_per_batch": round(windows / batches, 2) if batches else 0.0,
    }


def cpu_seconds(pid: int) -> float | None:
    """User + system CPU time of a process so far (Linux /proc), or None."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return None


def parse_plan(text: str) -> list[tuple[float, list[int]]]:
    plan = []
    for group in filter(None, text.split(";")):
        secs, levels = group.split(":")
        plan.append((float(secs), [int(c) for c in levels.split(",")]))
    return plan


def main() -> None:
    from asr.offline.server import ServerOptions

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--engine", default="whisper", choices=("whisper", "parakeet"))
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--model", default="", help="whisper: CTranslate2 dir; parakeet: checkpoint (folder or .nemo)")
    ap.add_argument("--dtype", default="float32", help="parakeet: float32 | bfloat16")
    ap.add_argument("--encoder-backend", default="eager", help="parakeet: eager | compiled | onnx | tensorrt")
    ap.add_argument("--parakeet-backend", default="auto", choices=("auto", "fast", "general"),
                    help="parakeet: fast (profiled GPU encoder), general, auto (fast on CUDA)")
    ap.add_argument("--profiles", default="", help="parakeet fast: encoder profiles name=BATCHxFRAMES,... "
                                                   "(default: 10/20/30 s at the max batch)")
    ap.add_argument("--max-batch", type=int, default=0, help="windows per engine call (0: the engine's default)")
    defaults = ServerOptions()
    ap.add_argument("--max-inflight", type=int, default=defaults.max_inflight,
                    help="server: requests held at once (default: the server's, %(default)s)")
    ap.add_argument("--max-audio-held-s", type=float, default=defaults.max_audio_held_s,
                    help="server: decoded audio held at once (default: the server's, %(default)s)")
    ap.add_argument("--plan", default=DEFAULT_PLAN, help="clip_s:concurrency,...;... (default %(default)s)")
    ap.add_argument("--min-audio-s", type=float, default=240.0, help="audio per level at least (repeats rounds)")
    ap.add_argument("--max-rounds", type=int, default=4, help="rounds of C requests per level at most")
    ap.add_argument("--name", default=None, help="result file name (default transcribe_server_ENGINE_DEVICE)")
    ap.add_argument("--price", type=float, default=None, help="USD per machine hour")
    ap.add_argument("--out", default=None, help="results folder (default bench/results)")
    ap.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.serve:
        return serve_main(args)
    price = args.price if args.price is not None else PRICES["cuda" if args.device.startswith("cuda") else "cpu"]
    name = args.name or f"transcribe_server_{args.engine}_{'gpu' if args.device.startswith('cuda') else 'cpu'}"
    t_start = time.perf_counter()
    proc, url, model = start_server(args)
    startup_s = round(time.perf_counter() - t_start, 1)
    print(f"server ready in {startup_s} s", flush=True)
    rows: list[dict[str, Any]] = []
    data: dict[str, Any] = {"engine": args.engine, "model": model, "device": args.device, "price_usd_per_hour": price,
                            "plan": args.plan, "max_inflight": args.max_inflight,
                            "max_audio_held_s": args.max_audio_held_s, "server_startup_s": startup_s, "results": rows}
    if args.engine == "parakeet":
        data.update(parakeet_backend=args.parakeet_backend, profiles=args.profiles, dtype=args.dtype)
    from bench.offline_report import save

    try:
        for clip_s, levels in parse_plan(args.plan):
            distinct = min(8, max(levels)) if clip_s < 600 else min(2, max(levels))  # long clips: few, to save time
            clips = [wav_bytes(speech(clip_s, seed)) for seed in range(distinct)]
            asyncio.run(run_level(url, model, clips[:1], clip_s, 1, 1))  # warm-up
            for c in levels:
                rounds = max(1, math.ceil(args.min_audio_s / (clip_s * c)))
                cpu0 = cpu_seconds(proc.pid)
                row = asyncio.run(run_level(url, model, clips, clip_s, c, c * min(rounds, args.max_rounds)))
                cpu1 = cpu_seconds(proc.pid)
                row["usd_per_audio_hour"] = round(price / row["audio_s_per_wall_s"], 5)
                if cpu0 is not None and cpu1 is not None:  # robust to other load on a shared machine
                    row["server_cpu_s"] = round(cpu1 - cpu0, 2)
                    row["audio_s_per_server_cpu_s"] = round(row["requests"] * clip_s / (cpu1 - cpu0), 2)
                rows.append(row)
                save(name, data, args.out)  # partial results survive a run cut short
                print(f"clip {clip_s:6g} s  x{c:<3d}: {row['audio_s_per_wall_s']:8.1f} audio s/s  "
                      f"p50 {row['latency_p50_s']:7.2f} s  p90 {row['latency_p90_s']:7.2f} s  "
                      f"batch {row['windows_per_batch']:5.2f}  {row.get('audio_s_per_server_cpu_s', 0):6.1f} audio s/cpu s  "
                      f"${row['usd_per_audio_hour']:.4f}/audio h", flush=True)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    summary = {}
    for clip_s, _ in parse_plan(args.plan):
        level_rows = [r for r in rows if r["clip_s"] == clip_s]
        best = max(level_rows, key=lambda r: r["audio_s_per_wall_s"])
        one = next(r for r in level_rows if r["concurrency"] == min(x["concurrency"] for x in level_rows))
        summary[f"{clip_s:g}s"] = {"best_audio_s_per_wall_s": best["audio_s_per_wall_s"],
                                   "at_concurrency": best["concurrency"],
                                   "best_vs_concurrency_1": round(best["audio_s_per_wall_s"] / one["audio_s_per_wall_s"], 2),
                                   "usd_per_audio_hour": best["usd_per_audio_hour"]}
        if not args.device.startswith("cuda") and "audio_s_per_server_cpu_s" in best:
            # What the same work costs when every core is busy at the measured efficiency.
            per_core = max(r["audio_s_per_server_cpu_s"] for r in level_rows)
            summary[f"{clip_s:g}s"]["usd_per_audio_hour_all_cores_busy"] = round(price / (os.cpu_count() or 1) / per_core, 5)
            summary[f"{clip_s:g}s"]["best_audio_s_per_server_cpu_s"] = per_core
        print(f"{clip_s:g} s clips: best {best['audio_s_per_wall_s']} audio s/s at x{best['concurrency']} "
              f"({summary[f'{clip_s:g}s']['best_vs_concurrency_1']}x concurrency 1); "
              f"${best['usd_per_audio_hour']:.4f} per audio hour at ${price}/h")
    data["summary"] = summary
    data["total_wall_s"] = round(time.perf_counter() - t_start, 1)
    print(f"wrote {save(name, data, args.out)} ({data['total_wall_s']} s in all)")


if __name__ == "__main__":
    main()
