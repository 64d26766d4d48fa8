"""Throughput of ``POST /v1/audio/transcriptions`` through HTTP, next to the engine's own RTFx.

GPU (H200), one command from the repository root, on a machine with torch + CUDA (pipecat, loguru
and pytest are not needed; it imports asr/, bench/, agent.models and agent/__init__ only):

    pip install aiohttp uvloop numpy soundfile soxr 'transformers>=5.0'   # what torch + CUDA lack
    python3 bench/transcribe_server.py --device cuda

That runs Parakeet-TDT with the 0.6B v3 architecture and random weights biased to emit like speech
(``--model random-v3``, the default on CUDA; give a checkpoint folder for the real model), bf16, the
fast backend, and ``cadence transcribe-server``'s defaults (host worker processes: min(cores - 1, 8);
``max_inflight`` raised to the largest concurrency of the plan, the only change), over the plan
``10:1,256;mix:256;3600:4``: one 10 s request alone (its p50 latency), 10 s clips at 256 requests in
flight, the leaderboard-like length mix (1-35 s, mean ~7 s, like LibriSpeech test-clean:
``bench/transcribe_load.py``) at 256, and 1 h files four at once. It writes
``bench/results/transcribe_server_parakeet_gpu.json`` (``--name``, ``--out``) with, per group,
audio s per wall s through HTTP, the engine's own RTFx at the same lengths measured in the same run
(the server process, before it serves: the same windows, batched by length, engine calls timed
alone), their ratio, p50/p90 latency, and the server's CPU seconds (engine process + host workers)
per audio hour, and the engine's busy share of the wall time (``engine_busy_frac``: below 1 the engine
waited on the host; ``engine_busy_s`` against the engine-alone wall: batches worse than alone). Clients are ``--clients`` processes (default 4 on CUDA) so the load generator is
not the limit (``client_cpu_s`` says how busy they were).

The host path alone (``--engine null``: no model, words made up at once), any machine:
    python3 bench/transcribe_server.py --engine null --plan "10:64;3600:4" --workers 8
With a GPU stand-in that takes time but no CPU (``--engine sleep``: the fast backend's profile
replays slept at ``--sleep-rtfx``), whether the host path keeps an engine busy, on a CPU box:
    python3 bench/transcribe_server.py --engine sleep --sleep-rtfx 6000 --plan "3600:4" --workers 2

CPU, embedded Whisper tiny.en (the server's defaults: one process):
    python3 bench/transcribe_server.py
    python3 bench/transcribe_server.py --workers 1 --name transcribe_server_whisper_cpu_workers1

``--plan`` is ``CLIPS:concurrency,...`` groups separated by ``;`` (CLIPS: seconds, or ``mix``);
``--price`` the machine's USD per hour (defaults: $0.085 for a 2-vCPU cloud VM, $3.50 for one H200).
``--parakeet-backend`` picks the profiled GPU encoder (``fast``, the default on CUDA; ``--profiles``
sets its shapes) or the general engine (``general``).
"""

from __future__ import annotations

import argparse
import asyncio
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

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from agent.capacity.server_cpu import tree_cpu_seconds  # noqa: E402
from bench.transcribe_load import Clients, clip_set, speech  # noqa: E402

CPU_PLAN = "10:1,4,8;mix:8;300:4"
GPU_PLAN = "10:1,256;mix:256;3600:4"
PRICES = {"cpu": 0.085, "cuda": 3.50}


def parse_plan(text: str) -> list[tuple[str, list[int]]]:
    plan = []
    for group in filter(None, text.split(";")):
        clips, levels = group.split(":")
        if clips != "mix":
            float(clips)
        plan.append((clips, [int(c) for c in levels.split(",")]))
    return plan


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
        costs = {f: fast.batch_costs(f) for f in sorted({p.frames for p in transcriber.profiles})}
        print("replay ms by class (frames: batch=ms): " + "; ".join(
            f"{f}: " + ", ".join(f"{b}={s * 1000:.1f}" for b, s in c) for f, c in costs.items() if c), flush=True)
        return fast
    engine = ParakeetEngine(ckpt, device=spec.device, dtype=spec.dtype, encoder_backend=spec.encoder_backend)
    engine.warmup()
    return ParakeetWindowEngine(engine, "parakeet-random-v3", max_batch, PlanOptions())


class NullEngine:
    """No model: 2.5 made-up words per second of each window, at once. What the host path alone carries."""

    name, sample_rate, max_batch, languages = "null", 16000, 64, None

    def __init__(self) -> None:
        from asr.offline.plan import PlanOptions

        self.plan = PlanOptions()

    def transcribe_windows(self, windows: list[Any], language: str | None) -> list[list[Any]]:
        from asr.offline.results import Word

        return [[Word(k * 0.4, k * 0.4 + 0.3, f" w{k}") for k in range(int(len(w) / 16000 * 2.5))] for w in windows]


class SleepEngine(NullEngine):
    """A GPU stand-in for CPU runs: the null engine's words after a sleep (the GIL released, no CPU) as long as
    the fast Parakeet backend's replays: its default profiles (``offline_profiles(64)``: 3.8/6.4/10/20/30 s
    classes at 64 and at a small batch), each batch split over them as ``plan_batches`` splits it, a replay
    costing ``fixed_ms`` plus its whole batch of audio at ``rtfx``. It names length classes and batch costs as
    the fast backend does, so the window batcher sizes batches as it does on the GPU."""

    name = "sleep"

    def __init__(self, rtfx: float, fixed_ms: float = 5.0, profiles: str = "") -> None:
        from asr.parakeet.encoders.shape_profiles import offline_profiles, parse_profiles

        super().__init__()
        self.rtfx, self.fixed_s = rtfx, fixed_ms / 1000
        self.profiles = parse_profiles(profiles or offline_profiles(self.max_batch))
        self.classes = sorted({p.frames for p in self.profiles})

    def replay_s(self, batch: int, frames: int) -> float:
        return self.fixed_s + batch * frames * 160 / 16000 / self.rtfx

    def length_class(self, samples: int) -> int:
        frames = int(samples) // 160 + 1
        return next((f for f in self.classes if f >= frames), self.classes[-1])

    def batch_costs(self, length_class: int) -> list[tuple[int, float]]:
        return sorted((p.batch, self.replay_s(p.batch, p.frames)) for p in self.profiles if p.frames == length_class)

    def transcribe_windows(self, windows: list[Any], language: str | None) -> list[list[Any]]:
        from asr.parakeet.encoders.shape_profiles import plan_batches

        counts: dict[int, int] = {}
        for w in windows:
            cls = self.length_class(len(w))
            counts[cls] = counts.get(cls, 0) + 1
        time.sleep(sum(self.replay_s(p.batch, p.frames) for f, n in counts.items()
                       for p, _, _ in plan_batches(self.profiles, n, f)))
        return super().transcribe_windows(windows, language)


def build_engine(args: argparse.Namespace) -> Any:
    if args.engine == "null":
        return NullEngine()
    if args.engine == "sleep":
        return SleepEngine(args.sleep_rtfx, args.sleep_fixed_ms, args.profiles)
    from agent.models import resolve_engine_spec
    from asr.offline.engine_factory import make_engine
    from asr.offline.window_engine import EngineSpec

    spec = EngineSpec(engine=args.engine, model=args.model, device=args.device, max_batch=args.max_batch,
                      dtype=args.dtype, encoder_backend=args.encoder_backend,
                      parakeet_backend=args.parakeet_backend, profiles=args.profiles)
    return random_v3_engine(spec) if args.model == "random-v3" else make_engine(resolve_engine_spec(spec))


def engine_rtfx(engine: Any, plan: list[tuple[str, list[int]]], min_audio_s: float, passes: int) -> dict[str, Any]:
    """The engine alone on each group's clips: the server's windows, batched by length, engine calls
    timed; the best of ``passes`` passes."""
    from asr.offline.plan import plan_windows
    from asr.offline.window_batcher import length_batches

    out: dict[str, Any] = {}
    for key, levels in plan:
        distinct = clip_set(key, max(levels))
        audio = [speech(s, seed) for s, seed in distinct]
        per_clip = [[w.audio(a) for w in plan_windows(a, engine.sample_rate, engine.plan)] for a in audio]
        n = max(levels)  # as many clips as the largest level has in flight, more up to min_audio_s
        while sum(len(audio[i % len(audio)]) for i in range(n)) / 16000 < min_audio_s:
            n += 1
        windows = [w for i in range(n) for w in per_clip[i % len(audio)]]
        audio_s = sum(len(audio[i % len(audio)]) for i in range(n)) / 16000
        engine.transcribe_windows(windows[: engine.max_batch], None)  # warm-up
        batches = length_batches([len(w) for w in windows], engine.max_batch)
        walls = []
        for _ in range(passes):  # the best pass: the first also meets shapes for the first time
            t0 = time.perf_counter()
            for batch in batches:
                engine.transcribe_windows([windows[i] for i in batch], None)
            walls.append(time.perf_counter() - t0)
        wall = min(walls)
        out[key] = {"audio_s": round(audio_s, 1), "windows": len(windows), "batches": len(batches),
                    "wall_s": round(wall, 3), "rtfx": round(audio_s / wall, 1)}
        if getattr(engine, "pipelined", False):  # the same batches, each handed over before the last one's words
            piped = min(_pipelined_pass(engine, [[windows[i] for i in b] for b in batches]) for _ in range(passes))
            out[key]["rtfx_pipelined"] = round(audio_s / piped, 1)
        print(f"engine alone, {key} clips: {out[key]['rtfx']:.1f}x real time ({len(windows)} windows)"
              + (f", {out[key]['rtfx_pipelined']:.1f}x pipelined" if "rtfx_pipelined" in out[key] else ""), flush=True)
    return out


def _pipelined_pass(engine: Any, batches: list[list[Any]]) -> float:
    """Seconds for ``batches`` run as the window batcher runs a pipelined engine: batch k+1 launched once batch k
    is encoded, then batch k's words read."""
    t0 = time.perf_counter()
    flight = None
    for batch in batches:
        if flight is not None:
            engine.wait_encoded(flight)
        launched = engine.launch_windows(batch, None)
        if flight is not None:
            engine.finish_windows(flight)
        flight = launched
    if flight is not None:
        engine.finish_windows(flight)
    return time.perf_counter() - t0


def serve_main(args: argparse.Namespace) -> None:
    """Child process: build the engine, time it alone, serve with the server's defaults, print the URL."""
    from asr.offline.host_pool import default_workers, serve_workers
    from asr.offline.server import ServerOptions, serve
    from asr.offline.transcriber import OfflineTranscriber

    engine = build_engine(args)
    if args.engine_plan:
        passes = 2 if args.device.startswith("cuda") else 1  # cheap on a GPU; Whisper on the CPU is slow
        alone = engine_rtfx(engine, parse_plan(args.engine_plan), args.min_audio_s, passes)
        print("ENGINE " + json.dumps(alone), flush=True)
    workers = default_workers(args.device) if args.workers is None else args.workers
    options = ServerOptions(max_inflight=args.max_inflight, max_audio_held_s=args.max_audio_held_s)
    transcriber = OfflineTranscriber(engine, args.max_batch or None)

    def ready(url: str) -> None:
        print(f"READY {url} {engine.name} {workers}", flush=True)

    main = (serve_workers(transcriber, "127.0.0.1", 0, workers, options, ready, balance=args.balance) if workers
            else serve(transcriber, "127.0.0.1", 0, options, ready))
    try:
        import uvloop

        uvloop.run(main)
    except ImportError:
        asyncio.run(main)


def start_server(args: argparse.Namespace) -> tuple[subprocess.Popen[str], str, str, int, dict[str, Any]]:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--serve", "--engine", args.engine, "--device",
           args.device, "--model", args.model, "--max-batch", str(args.max_batch), "--dtype", args.dtype,
           "--encoder-backend", args.encoder_backend, "--parakeet-backend", args.parakeet_backend,
           "--profiles", args.profiles, "--max-inflight", str(args.max_inflight),
           "--max-audio-held-s", str(args.max_audio_held_s), "--min-audio-s", str(args.min_audio_s),
           "--engine-plan", "" if args.no_engine_rtfx else args.plan, "--sleep-rtfx", str(args.sleep_rtfx),
           "--sleep-fixed-ms", str(args.sleep_fixed_ms), "--balance", args.balance]
    if args.workers is not None:
        cmd += ["--workers", str(args.workers)]
    env = dict(os.environ, HF_HUB_OFFLINE="1", PYTHONUNBUFFERED="1")
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert proc.stdout is not None
    lines: list[str] = []
    alone: dict[str, Any] = {}
    for line in proc.stdout:
        lines.append(line)
        print("  server| " + line, end="", flush=True)
        if line.startswith("ENGINE "):
            alone = json.loads(line[len("ENGINE "):])
        m = re.match(r"READY (\S+) (\S+) (\d+)", line)
        if m:
            threading.Thread(target=lambda: [None for _ in proc.stdout], daemon=True).start()  # type: ignore[union-attr]
            return proc, m.group(1), m.group(2), int(m.group(3)), alone
    raise RuntimeError("server did not start:\n" + "".join(lines[-40:]))


def health(url: str) -> dict[str, Any]:
    import urllib.request

    with urllib.request.urlopen(url + "/health", timeout=30) as r:
        return json.loads(r.read())


def level_row(key: str, concurrency: int, run: dict[str, Any], cpu_s: float, price: float) -> dict[str, Any]:
    lat = run["latencies"]
    audio_s, wall = run["audio_s"], run["wall_s"]
    server = run["server"]
    return {
        "clips": key, "concurrency": concurrency, "requests": len(lat), "audio_s": round(audio_s, 1),
        "clip_s": round(audio_s / len(lat), 2),  # the mean for the mix (older readers take it as the length)
        "wall_s": round(wall, 3),
        "audio_s_per_wall_s": round(audio_s / wall, 1),
        "latency_p50_s": round(statistics.median(lat), 4), "latency_p90_s": round(lat[math.ceil(0.9 * len(lat)) - 1], 4),
        "decode_s_mean": round(statistics.fmean(s["decode_s"] for s in server), 4),
        "plan_s_mean": round(statistics.fmean(s["plan_s"] for s in server), 4),
        "asr_s_mean": round(statistics.fmean(s["asr_s"] for s in server), 4),
        "server_cpu_s": round(cpu_s, 2), "server_cpu_s_per_audio_h": round(cpu_s / (audio_s / 3600), 1),
        "audio_s_per_server_cpu_s": round(audio_s / cpu_s, 1) if cpu_s > 0 else None,
        "client_cpu_s": round(run["client_cpu_s"], 2),
        "usd_per_audio_hour": round(price / (audio_s / wall), 6),
    }


def main() -> None:
    from asr.offline.server import ServerOptions

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--engine", default=None, choices=("whisper", "parakeet", "null", "sleep"),
                    help="default: parakeet on CUDA, whisper on the CPU; null: no model (the host path alone); "
                         "sleep: a GPU stand-in (SleepEngine: profile replays slept at --sleep-rtfx)")
    ap.add_argument("--sleep-rtfx", type=float, default=6000.0, help="the sleep engine's speed (full batches)")
    ap.add_argument("--sleep-fixed-ms", type=float, default=5.0, help="the sleep engine's cost of any replay")
    ap.add_argument("--model", default=None, help="whisper: CTranslate2 dir; parakeet: checkpoint (folder or .nemo) "
                                                  "or random-v3 (the default for parakeet)")
    ap.add_argument("--dtype", default=None, help="parakeet: float32 | bfloat16 (default: bfloat16 on CUDA)")
    ap.add_argument("--encoder-backend", default="eager", help="parakeet general: eager | compiled | onnx | tensorrt")
    ap.add_argument("--parakeet-backend", default="auto", choices=("auto", "fast", "general"),
                    help="parakeet: fast (profiled GPU encoder), general, auto (fast on CUDA)")
    ap.add_argument("--profiles", default="", help="parakeet fast: encoder profiles name=BATCHxFRAMES,... "
                                                   "(default: 10/20/30 s at the max batch)")
    ap.add_argument("--max-batch", type=int, default=0, help="windows per engine call (0: the engine's default)")
    ap.add_argument("--workers", type=int, default=None,
                    help="host worker processes (default: the server's, min(cores - 1, 8) on CUDA, 0 on the CPU)")
    defaults = ServerOptions()
    ap.add_argument("--balance", default="least_loaded", choices=("least_loaded", "kernel"),
                    help="with host workers: who picks a connection's worker (the server's default: least_loaded)")
    ap.add_argument("--max-inflight", type=int, default=None,
                    help=f"server: requests held at once (default: the server's {defaults.max_inflight}, or the "
                         "plan's largest concurrency when higher)")
    ap.add_argument("--max-audio-held-s", type=float, default=defaults.max_audio_held_s,
                    help="server: decoded audio held at once (default: the server's, %(default)s)")
    ap.add_argument("--plan", default=None, help=f"CLIPS:concurrency,...;... (default: {CPU_PLAN!r} on the CPU, "
                                                 f"{GPU_PLAN!r} on CUDA)")
    ap.add_argument("--min-audio-s", type=float, default=None,
                    help="audio per level at least, in rounds of C requests (default: 240 on the CPU, 60000 on CUDA)")
    ap.add_argument("--max-rounds", type=int, default=32,
                    help="rounds of C requests per level at most (five times as many for C = 1)")
    ap.add_argument("--clients", type=int, default=None, help="client processes (default: 4 on CUDA, 1 on the CPU)")
    ap.add_argument("--no-engine-rtfx", action="store_true", help="skip timing the engine alone")
    ap.add_argument("--name", default=None, help="result file name (default transcribe_server_ENGINE_DEVICE)")
    ap.add_argument("--price", type=float, default=None, help="USD per machine hour")
    ap.add_argument("--out", default=None, help="results folder (default bench/results)")
    ap.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--engine-plan", default="", help=argparse.SUPPRESS)
    args = ap.parse_args()
    cuda = args.device.startswith("cuda")
    args.engine = args.engine or ("parakeet" if cuda else "whisper")
    args.model = args.model if args.model is not None else ("random-v3" if args.engine == "parakeet" else "")
    args.dtype = args.dtype or ("bfloat16" if cuda else "float32")
    args.plan = args.plan or (GPU_PLAN if cuda else CPU_PLAN)
    # On CUDA a level of 7,200 s of audio (three rounds of 256 x 10 s, the default until run 69) lasted 0.7-1.1 s of
    # wall, ramp and last partial batch included (runs 65, 69); 60,000 s is ~6 s at 10,000 audio s/s: sustained.
    args.min_audio_s = args.min_audio_s if args.min_audio_s is not None else (60000.0 if cuda else 240.0)
    plan = parse_plan(args.plan)
    args.max_inflight = args.max_inflight or max(defaults.max_inflight, *(max(lv) for _, lv in plan))
    if args.serve:
        return serve_main(args)
    price = args.price if args.price is not None else PRICES["cuda" if cuda else "cpu"]
    name = args.name or f"transcribe_server_{args.engine}_{'gpu' if cuda else 'cpu'}"
    t_start = time.perf_counter()
    proc, url, model, workers, alone = start_server(args)
    startup_s = round(time.perf_counter() - t_start, 1)
    print(f"server ready in {startup_s} s ({workers} host workers)", flush=True)
    rows: list[dict[str, Any]] = []
    data: dict[str, Any] = {"engine": args.engine, "model": model, "device": args.device, "price_usd_per_hour": price,
                            "plan": args.plan, "host_workers": workers, "balance": args.balance, "max_inflight": args.max_inflight,
                            "max_audio_held_s": args.max_audio_held_s, "server_startup_s": startup_s,
                            "cores": os.cpu_count(), "engine_alone": alone, "results": rows}
    if args.engine == "parakeet":
        data.update(parakeet_backend=args.parakeet_backend, profiles=args.profiles, dtype=args.dtype)
    from bench.offline_report import save

    clients = Clients(args.clients or (4 if cuda else 1), model,
                      {key: clip_set(key, max(levels)) for key, levels in plan})
    try:
        for key, levels in plan:
            distinct = clip_set(key, max(levels))
            mean_s = statistics.fmean(s for s, _ in distinct)
            clients.run(url, key, 1, 1)  # warm-up
            for c in levels:
                cap = args.max_rounds if c > 1 else 5 * args.max_rounds  # alone: enough requests for a p50
                rounds = min(cap, max(1, math.ceil(args.min_audio_s / (mean_s * c))))
                own0, workers0 = tree_cpu_seconds(proc.pid)
                before = health(url)
                run = clients.run(url, key, c, c * rounds)
                after = health(url)
                own1, workers1 = tree_cpu_seconds(proc.pid)
                row = level_row(key, c, run, own1 - own0 + workers1 - workers0, price)
                row["engine_process_cpu_s"] = round(own1 - own0, 2)  # the rest is the host workers'
                batches = after["batches"] - before["batches"]
                row["windows_per_batch"] = round((after["windows"] - before["windows"]) / batches, 2) if batches else 0
                if "engine_busy_s" in after:  # the engine's time in its calls, against the level's wall time
                    busy = after["engine_busy_s"] - before["engine_busy_s"]
                    row["engine_busy_s"], row["engine_busy_frac"] = round(busy, 3), round(busy / run["wall_s"], 3)
                if "batch_sizes" in after:  # batches of each size this level ran
                    sizes = {k: v - before.get("batch_sizes", {}).get(k, 0) for k, v in after["batch_sizes"].items()}
                    row["batch_sizes"] = {k: v for k, v in sorted(sizes.items(), key=lambda kv: -int(kv[0])) if v}
                rows.append(row)
                save(name, data, args.out)  # partial results survive a run cut short
                print(f"{key:>6} clips x{c:<4d}: {row['audio_s_per_wall_s']:9.1f} audio s/s  "
                      f"p50 {row['latency_p50_s'] * 1000:8.1f} ms  p90 {row['latency_p90_s'] * 1000:8.1f} ms  "
                      f"{row['server_cpu_s_per_audio_h']:7.1f} server cpu s/audio h  "
                      f"batch {row['windows_per_batch']:5.2f}  engine busy {row.get('engine_busy_frac', 0):.2f}  "
                      f"client cpu {row['client_cpu_s']:.2f} s", flush=True)
    finally:
        clients.close()
        proc.terminate()
        proc.wait(timeout=60)
    data["summary"] = summarize(plan, rows, alone)
    data["total_wall_s"] = round(time.perf_counter() - t_start, 1)
    print(json.dumps(data["summary"], indent=1))
    print(f"wrote {save(name, data, args.out)} ({data['total_wall_s']} s in all)")


def summarize(plan: list[tuple[str, list[int]]], rows: list[dict[str, Any]], alone: dict[str, Any]) -> dict[str, Any]:
    summary: dict[str, Any] = {}
    for key, _ in plan:
        group = [r for r in rows if r["clips"] == key]
        best = max(group, key=lambda r: r["audio_s_per_wall_s"])
        engine = alone.get(key, {}).get("rtfx")
        summary[key] = {"best_audio_s_per_wall_s": best["audio_s_per_wall_s"], "at_concurrency": best["concurrency"],
                        "engine_alone_rtfx": engine,
                        "http_vs_engine": round(best["audio_s_per_wall_s"] / engine, 3) if engine else None,
                        "server_cpu_s_per_audio_h": best["server_cpu_s_per_audio_h"],
                        "usd_per_audio_hour": best["usd_per_audio_hour"],
                        "latency_p50_s_at_best": best["latency_p50_s"]}
        one = [r for r in group if r["concurrency"] == 1]
        if one:
            summary[key]["single_request_latency_p50_s"] = one[0]["latency_p50_s"]
    return summary


if __name__ == "__main__":
    main()
