"""Kokoro GPU TTS alone: time to first audio, batch throughput, and concurrent real-time streams.

    CADENCE_COMMIT=$(git rev-parse --short HEAD) PYTHONPATH=. python3 bench/tts_gpu.py --g2p none --out $OUT/tts_gpu.json

Full-size Kokoro-82M with random weights (durations calibrated to ~60 ms a phoneme symbol) through the real
engine (``tts.kokoro.engine.KokoroEngine``: its SynthesisBatcher, clause streaming, deadlines):

1. ``single``: time to first audio at one stream: p50/p99 over ``--single-n`` first clauses.
2. ``batches``: one GPU call of B copies of a typical clause, per B, decoder dtype and eager/compiled
   (ms, audio s/s, peak memory, first-call time = torch.compile builds): where batching, bf16 and the
   compiled AdaIN/Snake steps pay. ``--compile`` (default) compiles the engine used by 1 and 3.
3. ``ramp``: N concurrent streams. Each stream is a caller hearing replies: it asks for a reply (2-4
   sentences of agent text, clause-streamed), reads its pieces as they come (a transport buffers
   them), plays them in real time, pauses as a caller would speak, and asks again. Per level:
   first-audio latency p50/p99 (request -> first piece), each reply's delivery ratio (the runtime's
   ``output_rt_ratio``: audio that arrived before the last piece / time from first to last piece),
   its 1st percentile over all replies (the runtime's capacity rule) and over streams (each stream's
   ratio over the level), late pieces (the player ran dry), and the batcher's ticks.
   ``max_streams_ok`` is the largest level whose p1 reply ratio is >= 1.2.

``--g2p none`` maps letters onto Kokoro's phoneme vocabulary (the H200 image has no espeak-ng): a
load test with realistic phoneme counts, not speech. Falls back to the CPU (with a warning) without
CUDA; ``--tiny`` selects the tiny configuration there.
"""

from __future__ import annotations

import argparse
import asyncio
import faulthandler
import json
import logging
import os
import platform
import random
import statistics
import subprocess
import sys
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tts.kokoro.engine import KokoroEngine  # noqa: E402
from tts.kokoro.model import Utterance  # noqa: E402
from tts.kokoro.options import KokoroOptions  # noqa: E402

REPLIES = [
    "Sure, I can help with that. Your order shipped this morning and should arrive on Thursday.",
    "Thanks for waiting. I found your account, and the last payment was received on the third.",
    "Of course. The store opens at nine in the morning and closes at eight in the evening, every day "
    "except Sunday.",
    "I'm sorry about the trouble. Let me check what happened with your delivery. It looks like the "
    "driver could not reach the door, so the package went back to the depot.",
    "Good question. The basic plan includes unlimited calls and ten gigabytes of data. The premium plan "
    "doubles the data and adds international roaming.",
    "Got it. I've booked a table for four at seven thirty tonight. You'll get a confirmation by text.",
    "Let me see. The next train to the airport leaves in twelve minutes from platform three. After that, "
    "there is one every twenty minutes.",
    "No problem at all. I've cancelled the appointment. Would you like me to find another time next week?",
    "Your balance is two hundred and forty dollars. The next bill is due on the fifteenth, and autopay is on.",
    "Alright, I can reset that for you. You'll receive a link by email in a minute or two. The link stays "
    "valid for one hour.",
    "The weather tomorrow looks mild, with a high of twenty degrees. There is a small chance of rain in "
    "the afternoon, so an umbrella might help.",
    "I understand. I've escalated the case to our technical team, and someone will call you back within "
    "twenty four hours.",
    "Yes, we do deliver on weekends. Saturday deliveries arrive before noon, and there is no extra charge.",
    "Perfect. Your new address is saved. Future orders will go to the new place, starting with the next one.",
    "Hmm, that item is out of stock right now. It should be back in about two weeks. I can notify you when "
    "it arrives, if you like.",
    "Certainly. The refund was issued yesterday. Depending on your bank, it can take three to five business "
    "days to show up.",
]
FIRST_CLAUSES = [r.split(".")[0] + "." for r in REPLIES]


# ---------------------------------------------------------------------------------------------- helpers
def _f(x: float | None) -> str:
    return "-" if x is None else f"{x:.1f}"


def pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    s = sorted(values)
    return s[min(len(s) - 1, max(0, round(q / 100 * (len(s) - 1))))]


def git_commit() -> str:
    env = os.environ.get("CADENCE_COMMIT")
    if env:
        return env
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, timeout=5,
                             cwd=Path(__file__).resolve().parents[1])
        return out.stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def environment() -> dict[str, Any]:
    env: dict[str, Any] = {"command": " ".join([os.path.basename(sys.executable), *sys.argv]), "commit": git_commit(),
                           "python": platform.python_version(), "torch": torch.__version__,
                           "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    if torch.cuda.is_available():
        env["gpu"] = torch.cuda.get_device_name()
        env["cuda"] = torch.version.cuda
    return env


def decoder_graphs(engine: KokoroEngine) -> dict[str, Any] | None:
    """The CUDA graphs (acoustic side, and text side when captured): buckets, capture time, replays and eager
    fallbacks so far."""
    def one(g: Any) -> dict[str, Any]:
        return {"buckets": g.captured, "capture_s": round(g.capture_s, 1), "replays": g.replays,
                "fallbacks": g.fallbacks, "split_batches": g.split_batches, "plan": g.plan_mode,
                "replay_ms": {f"{b}x{n}": round(ms, 2) for (b, n), ms in sorted(g.replay_ms.items())}}

    if engine.model.graphs is None:
        return None
    out = one(engine.model.graphs)
    if engine.model.text_graphs is not None:
        out["text"] = one(engine.model.text_graphs)
    return out


def compiled_graphs() -> int:
    """Graphs torch.compile has built in this process (a rise during the ramp = a recompile while serving)."""
    try:
        return int(torch._dynamo.utils.counters["stats"]["unique_graphs"])
    except (AttributeError, KeyError):
        return 0


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


# ---------------------------------------------------------------------------------------------- 1. single stream
async def single_stream(engine: KokoroEngine, n: int) -> dict[str, Any]:
    lat = []
    for i in range(n):
        text = FIRST_CLAUSES[i % len(FIRST_CLAUSES)]
        while engine.batcher.pending or engine.batcher.in_flight:  # alone on an idle engine
            await asyncio.sleep(0.001)
        t0 = time.perf_counter()
        stream = engine.synthesize_stream(text)
        await stream.__anext__()
        lat.append((time.perf_counter() - t0) * 1000)
        await stream.aclose()
    return {"n": n, "first_audio_ms": {"p50": pct(lat, 50), "p99": pct(lat, 99), "min": min(lat), "max": max(lat)}}


# ---------------------------------------------------------------------------------------------- 2. batches
def batch_sweep(engine: KokoroEngine, sizes: list[int], modes: list[tuple[str, bool]], iters: int
                ) -> list[dict[str, Any]]:
    """One GPU call of B copies of a typical clause, per (decoder dtype, compiled) mode (the batcher is idle).

    Each mode's first call (``warm_s``) builds what that mode needs (torch.compile graphs when compiled).
    """
    model, dev = engine.model, engine.device
    ids = engine.phoneme_ids("Sure, I can help with that, your order shipped this morning.")
    rows = []
    original = model.decoder_dtype, model.compiled
    # the eager/compiled rows run without the captured graphs
    graphs, model.graphs = model.graphs, None
    text_graphs, model.text_graphs = model.text_graphs, None
    engine_mode = str(original[0]).removeprefix("torch."), original[1]
    if graphs is not None:  # last: the engine's own mode, replayed from its acoustic graphs (and text graphs)
        modes = [*modes, (*engine_mode, "graphs")]  # type: ignore[list-item]
        if text_graphs is not None:
            modes.append((*engine_mode, "graphs+text"))  # type: ignore[arg-type]
    for mode in modes:
        dtype, compiled = mode[0], mode[1]
        replay = mode[2] if len(mode) > 2 else ""  # type: ignore[misc]
        model.set_decoder_dtype(getattr(torch, dtype))
        model.set_compiled(compiled, engine.options.compile_mode or None)
        model.graphs = graphs if replay else None
        model.text_graphs = text_graphs if replay == "graphs+text" else None
        label = f"{dtype} {'compiled' if compiled else 'eager'}{' ' + replay if replay else ''}"
        t_mode = time.perf_counter()
        for b in sizes:
            items = [Utterance(ids, engine.style_for(len(ids)), 1.0) for _ in range(b)]
            t0 = time.perf_counter()
            model.synthesize(items, frame_bucket=engine.options.frame_bucket)  # warm this shape (and compile)
            sync(dev)
            warm_s = time.perf_counter() - t0
            if dev.type == "cuda":
                torch.cuda.reset_peak_memory_stats(dev)
                base = torch.cuda.memory_allocated(dev)
            times, audio_s = [], 0.0
            for _ in range(iters):
                t0 = time.perf_counter()
                res = model.synthesize(items, frame_bucket=engine.options.frame_bucket)
                sync(dev)
                times.append(time.perf_counter() - t0)
                audio_s = sum(len(a) for a in res.audio) / engine.sample_rate
            ms = statistics.median(times) * 1000
            row = {"dtype": dtype, "compiled": compiled, "cuda_graphs": replay or False, "batch": b, "ms": round(ms, 2),
                   "min_ms": round(min(times) * 1000, 2), "audio_s": round(audio_s, 2),
                   "audio_s_per_s": round(audio_s / (ms / 1000), 1), "warm_s": round(warm_s, 2)}
            if dev.type == "cuda":
                row["peak_mib"] = round((torch.cuda.max_memory_allocated(dev) - base) / 2**20, 1)
            rows.append(row)
            print(f"  batch {label:25s} B={b:4d}: {ms:8.2f} ms, {row['audio_s_per_s']:9.1f} audio s/s"
                  f" (first call {warm_s:.2f} s)", flush=True)
        print(f"  {label}: {time.perf_counter() - t_mode:.1f} s for the mode", flush=True)
    model.set_decoder_dtype(original[0])
    model.set_compiled(original[1], engine.options.compile_mode or None)
    model.graphs, model.text_graphs = graphs, text_graphs
    return rows


def profile_batch(engine: KokoroEngine, b: int, modes: list[tuple[str, bool]], rows: int = 12) -> dict[str, str]:
    """torch.profiler's top kernels for one call of B copies per mode (where the time goes, eager vs compiled)."""
    from torch.profiler import ProfilerActivity, profile

    model, dev = engine.model, engine.device
    ids = engine.phoneme_ids("Sure, I can help with that, your order shipped this morning.")
    items = [Utterance(ids, engine.style_for(len(ids)), 1.0) for _ in range(b)]
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if dev.type == "cuda" else [])
    key = "cuda_time_total" if dev.type == "cuda" else "cpu_time_total"
    original = model.decoder_dtype, model.compiled
    tables = {}
    for dtype, compiled in modes:
        model.set_decoder_dtype(getattr(torch, dtype))
        model.set_compiled(compiled, engine.options.compile_mode or None)
        model.synthesize(items, frame_bucket=engine.options.frame_bucket)  # warm
        sync(dev)
        with profile(activities=activities) as prof:
            model.synthesize(items, frame_bucket=engine.options.frame_bucket)
            sync(dev)
        label = f"{dtype} {'compiled' if compiled else 'eager'} B={b}"
        tables[label] = prof.key_averages().table(sort_by=key, row_limit=rows, max_name_column_width=60)
        print(f"  profile {label}:\n{tables[label]}", flush=True)
    model.set_decoder_dtype(original[0])
    model.set_compiled(original[1], engine.options.compile_mode or None)
    return tables


# ---------------------------------------------------------------------------------------------- 3. ramp
@dataclass
class Reply:
    stream: int
    requested: float
    arrivals: list[float] = field(default_factory=list)
    audio: list[float] = field(default_factory=list)
    late_s: float = 0.0
    done: bool = False

    @property
    def first_audio_ms(self) -> float:
        return (self.arrivals[0] - self.requested) * 1000

    @property
    def ratio(self) -> float | None:
        """Audio that arrived before the last piece / time from the first piece to the last."""
        span = self.arrivals[-1] - self.arrivals[0]
        if len(self.arrivals) < 2 or span <= 0.010:
            return None
        return min(sum(self.audio[:-1]) / span, 1000.0)


async def caller(engine: KokoroEngine, idx: int, stop_at: float, replies: list[Reply], rng: random.Random,
                 pause_s: tuple[float, float], busy: set[int]) -> None:
    """Ask for replies until ``stop_at``; a reply asked before then is always received whole."""
    await asyncio.sleep(rng.uniform(0, pause_s[1]))  # stagger the starts
    loop = asyncio.get_running_loop()
    while loop.time() < stop_at:
        reply = Reply(idx, loop.time())
        play_end = 0.0
        busy.add(idx)
        try:
            async for pcm in engine.synthesize_stream(rng.choice(REPLIES)):
                now = loop.time()
                dur = len(pcm) / 2 / engine.sample_rate
                if reply.arrivals and now > play_end:
                    reply.late_s = max(reply.late_s, now - play_end)
                play_end = max(play_end, now) + dur
                reply.arrivals.append(now)
                reply.audio.append(dur)
        finally:
            busy.discard(idx)
        reply.done = True
        replies.append(reply)
        # hear the rest of the reply, then the caller talks for a while before the next one
        await asyncio.sleep(max(0.0, play_end - loop.time()) + rng.uniform(*pause_s))


async def run_level(engine: KokoroEngine, n: int, seconds: float, warm_s: float, pause_s: tuple[float, float],
                    seed: int) -> dict[str, Any]:
    loop = asyncio.get_running_loop()
    start = loop.time()
    stop_at = start + warm_s + seconds
    replies: list[Reply] = []
    busy: set[int] = set()
    stats0 = (engine.batcher.stats.ticks, engine.batcher.stats.utterances, engine.batcher.stats.busy_s)
    rng = random.Random(seed)
    tasks = [asyncio.ensure_future(caller(engine, i, stop_at, replies, random.Random(rng.random()), pause_s, busy))
             for i in range(n)]
    await asyncio.sleep(stop_at - loop.time())
    while busy:  # replies asked before stop_at finish; nobody asks for another
        await asyncio.sleep(0.01)
    wall = loop.time() - start
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    kept = [r for r in replies if r.done and r.requested >= start + warm_s]
    first = [r.first_audio_ms for r in kept]
    ratios = [x for r in kept if (x := r.ratio) is not None]
    per_stream: dict[int, list[Reply]] = {}
    for r in kept:
        if r.ratio is not None:
            per_stream.setdefault(r.stream, []).append(r)
    # a stream's ratio over the level: audio ahead of each reply's last piece / the replies' spans, summed
    stream_ratio = [sum(sum(r.audio[:-1]) for r in rs) / sum(r.arrivals[-1] - r.arrivals[0] for r in rs)
                    for rs in per_stream.values()]
    stream_min = [min(r.ratio for r in rs) for rs in per_stream.values()]
    ticks = engine.batcher.stats.ticks - stats0[0]
    utts = engine.batcher.stats.utterances - stats0[1]
    busy = engine.batcher.stats.busy_s - stats0[2]
    row = {
        "streams": n, "replies": len(kept), "wall_s": round(wall, 1),
        "first_audio_ms": {"p50": pct(first, 50), "p95": pct(first, 95), "p99": pct(first, 99)},
        "reply_ratio": {"p50": pct(ratios, 50), "p1": pct(ratios, 1), "min": min(ratios) if ratios else None,
                        "n": len(ratios)},
        "stream_ratio": {"p50": pct(stream_ratio, 50), "p1": pct(stream_ratio, 1), "n": len(stream_ratio)},
        "stream_worst_reply_ratio_p1": pct(stream_min, 1),
        "late_replies": sum(1 for r in kept if r.late_s > 0.02),
        "max_late_ms": round(max((r.late_s for r in kept), default=0.0) * 1000, 1),
        "audio_s_delivered": round(sum(sum(r.audio) for r in kept), 1),
        "batcher": {"ticks": ticks, "utterances": utts, "mean_batch": round(utts / ticks, 2) if ticks else 0,
                    "busy_fraction": round(busy / wall, 3)},
    }
    p1 = row["reply_ratio"]["p1"]
    row["ok"] = bool(kept) and p1 is not None and p1 >= 1.2
    return row


async def ramp(engine: KokoroEngine, levels: list[int], args: argparse.Namespace, rows: list[dict[str, Any]],
               save: Callable[[], None]) -> None:
    """Run the levels in order, appending each row to ``rows`` and saving after each."""
    fails = 0
    for i, n in enumerate(levels):
        row = await run_level(engine, n, args.level_s, args.warm_s, (args.pause_min, args.pause_max), seed=i)
        rows.append(row)
        save()
        fa, rr = row["first_audio_ms"], row["reply_ratio"]
        print(f"  {n:5d} streams: first audio p50 {_f(fa['p50'])} p99 {_f(fa['p99'])} ms, reply ratio p1 "
              f"{_f(rr['p1'])} (n={rr['n']}), stream ratio p1 {_f(row['stream_ratio']['p1'])}, late "
              f"{row['late_replies']}, mean batch {row['batcher']['mean_batch']},"
              f" busy {row['batcher']['busy_fraction']} {'OK' if row['ok'] else 'FAIL'}", flush=True)
        fails = 0 if row["ok"] else fails + 1
        if fails >= args.stop_after_fails:
            break


def plot_ramp(path: Path, rows: list[dict[str, Any]], title: str) -> None:
    """The ramp's curve: reply ratio p1 (x real time, the 1.2x rule) and first audio p99 against streams."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = sorted(rows, key=lambda r: r["streams"])
    xs = [r["streams"] for r in rows]
    nan = float("nan")
    fig, ax = plt.subplots(figsize=(7.5, 4.5), dpi=120)
    ax.plot(xs, [r["reply_ratio"]["p1"] or nan for r in rows], "o-", color="tab:blue", label="reply ratio p1")
    ax.plot(xs, [r["stream_ratio"]["p1"] or nan for r in rows], "o--", color="tab:blue", alpha=0.45,
            label="stream ratio p1")
    ax.axhline(1.2, color="tab:red", linestyle=":", label="required 1.2x")
    ok = [r["streams"] for r in rows if r["ok"]]
    if ok:
        ax.axvline(max(ok), color="tab:green", linestyle="--", label=f"largest passing: {max(ok)} streams")
    ax.set_xlabel("concurrent streams")
    ax.set_ylabel("x real time")
    ax2 = ax.twinx()
    ax2.plot(xs, [r["first_audio_ms"]["p99"] or nan for r in rows], "s-", color="tab:orange",
             label="first audio p99 (ms)")
    ax2.set_ylabel("first audio p99, ms")
    lines = ax.get_legend_handles_labels()[0] + ax2.get_legend_handles_labels()[0]
    labels = ax.get_legend_handles_labels()[1] + ax2.get_legend_handles_labels()[1]
    ax.legend(lines, labels, fontsize=8, loc="upper right")
    ax.set_title(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


# ---------------------------------------------------------------------------------------------- main
def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="auto")
    p.add_argument("--dtype", default="bfloat16", help="decoder dtype for single + ramp (float32, bfloat16)")
    p.add_argument("--batch-dtypes", default="float32,bfloat16", help="eager rows of the batch table")
    p.add_argument("--batch-compiled-dtypes", default="bfloat16",
                   help="torch.compile rows of the batch table, beside the eager ones ('' for none)")
    p.add_argument("--compile", action=argparse.BooleanOptionalAction, default=True,
                   help="KokoroOptions.compile for the engine (single + ramp): fused AdaIN/Snake steps compiled")
    p.add_argument("--profile-batch", type=int, default=128,
                   help="after the batch table: torch.profiler top kernels of one call of this batch, per compiled "
                        "and eager mode of the first compiled dtype (0: off)")
    p.add_argument("--compile-mode", default="", help="torch.compile mode ('' = default)")
    p.add_argument("--cuda-graphs", action=argparse.BooleanOptionalAction, default=False,
                   help="KokoroOptions.cuda_graphs: the decoder replayed from CUDA graphs per (batch, frames) bucket; "
                        "the batch table then adds the engine's mode replayed from them")
    p.add_argument("--text-graphs", action=argparse.BooleanOptionalAction, default=True,
                   help="KokoroOptions.text_graphs (with --cuda-graphs): the text side replayed from graphs too")
    p.add_argument("--graph-plan", default="cost", choices=("cost", "fewest"),
                   help="KokoroOptions.graph_plan: replays of a batch at the least timed cost, or the fewest")
    p.add_argument("--cudnn-benchmark", action=argparse.BooleanOptionalAction, default=False,
                   help="KokoroOptions.cudnn_benchmark: cuDNN times its algorithms per shape at warm-up/capture")
    p.add_argument("--batch-sizes", default="1,8,32,64,128")
    p.add_argument("--batch-iters", type=int, default=3)
    p.add_argument("--max-batch", type=int, default=64)
    p.add_argument("--urgent-s", type=float, default=0.5, help="KokoroOptions.urgent_s (-1: plain EDF over all)")
    p.add_argument("--first-lane", action=argparse.BooleanOptionalAction, default=False,
                   help="KokoroOptions.first_lane: streams' first clauses on a worker, stream and graphs of their own")
    p.add_argument("--work-ahead-phonemes", type=int, default=0,
                   help="KokoroOptions.work_ahead_phonemes: a tick with nothing due soon stops at this many ids")
    p.add_argument("--hang-s", type=float, default=0.0,
                   help="if a phase or level runs this long, print every thread's stack and exit (0: never)")
    p.add_argument("--g2p", default="auto", help="espeak | none (letters: load test only) | auto")
    p.add_argument("--tiny", action="store_true", help="tiny configuration (CPU smoke runs)")
    p.add_argument("--single-n", type=int, default=50)
    p.add_argument("--levels", default="1,16,64,128,192,256,384,512")
    p.add_argument("--level-s", type=float, default=20.0)
    p.add_argument("--warm-s", type=float, default=2.0, help="per level, replies asked before this are not kept")
    p.add_argument("--pause-min", type=float, default=1.0, help="caller talking between replies, seconds")
    p.add_argument("--pause-max", type=float, default=3.0)
    p.add_argument("--stop-after-fails", type=int, default=2)
    p.add_argument("--skip", default="", help="comma list of phases to skip: single,batches,ramp")
    p.add_argument("--switch-interval", type=float, default=None,
                   help="sys.setswitchinterval seconds (the GIL hand-off between the event loop and the batcher "
                        "thread); default Python's 0.005")
    p.add_argument("--out", default="bench/results/tts_gpu.json")
    args = p.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    if args.switch_interval:
        sys.setswitchinterval(args.switch_interval)

    if args.device == "auto" and not torch.cuda.is_available():
        warnings.warn("no CUDA device: the benchmark runs on the CPU (figures are not the GPU's)", stacklevel=1)
    g2p = args.g2p
    if g2p == "auto":
        from tts.kokoro.g2p import EspeakG2P, G2PError

        try:
            EspeakG2P()
            g2p = "espeak"
        except G2PError:
            g2p = "none"
    g2p = "chars" if g2p == "none" else g2p
    skip = set(filter(None, args.skip.split(",")))

    t0 = time.perf_counter()
    engine = KokoroEngine(KokoroOptions(device=args.device, dtype=args.dtype, max_batch=args.max_batch, g2p=g2p,
                                        tiny=args.tiny, warmup=True, urgent_s=args.urgent_s,
                                        compile=args.compile, compile_mode=args.compile_mode,
                                        cuda_graphs=args.cuda_graphs, text_graphs=args.text_graphs,
                                        graph_plan=args.graph_plan, cudnn_benchmark=args.cudnn_benchmark,
                                        first_lane=args.first_lane, work_ahead_phonemes=args.work_ahead_phonemes))
    setup_s = time.perf_counter() - t0
    print(f"engine on {engine.device} ({engine.decoder_dtype}, {'compiled' if args.compile else 'eager'}) in "
          f"{setup_s:.1f} s (warm-up {engine.memory.warmup_s:.1f} s, {compiled_graphs()} compiled graphs); memory "
          f"{engine.memory.as_dict()}", flush=True)
    result: dict[str, Any] = {
        "environment": environment(),
        "config": {k: v for k, v in vars(args).items() if k != "out"},
        "engine": {"device": str(engine.device), "decoder_dtype": str(engine.decoder_dtype),
                   "g2p": g2p if g2p == "espeak" else "chars: letters mapped onto Kokoro's vocabulary (load test, "
                                                      "not speech)",
                   "weights": "random (real Kokoro-82M architecture)" if not args.tiny else "random, tiny config",
                   "parameters": sum(p.numel() for p in engine.model.parameters()),
                   "max_batch": args.max_batch, "compiled": args.compile,
                   "setup_s": round(setup_s, 1), "warmup_s": engine.memory.warmup_s,
                   "compiled_graphs_after_warmup": compiled_graphs(), "memory": engine.memory.as_dict(),
                   "cuda_graphs": decoder_graphs(engine)},
    }
    if args.cuda_graphs:
        print(f"decoder CUDA graphs: {decoder_graphs(engine)}", flush=True)

    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)

    def save() -> None:  # after every phase and level: a run cut short keeps what it measured
        if args.hang_s > 0:  # the watchdog restarts at every phase and level
            faulthandler.dump_traceback_later(args.hang_s, exit=True)
        ok = [r["streams"] for r in result.get("ramp", []) if r["ok"]]
        result["max_streams_ok"] = max(ok) if ok else 0
        result["compiled_graphs"] = compiled_graphs()
        out.write_text(json.dumps(result, indent=2, default=str) + "\n")

    try:
        save()
        if "single" not in skip:
            print("single stream:", flush=True)
            result["single"] = asyncio.run(single_stream(engine, args.single_n))
            print(f"  {result['single']}", flush=True)
            save()
        if "batches" not in skip:
            print("batches:", flush=True)
            sizes = [int(x) for x in args.batch_sizes.split(",") if x]
            usable = lambda d: d and (engine.device.type == "cuda" or d == "float32")  # noqa: E731
            modes = [(d, False) for d in args.batch_dtypes.split(",") if usable(d)]
            modes += [(d, True) for d in args.batch_compiled_dtypes.split(",") if usable(d)]
            t_b = time.perf_counter()
            result["batches"] = batch_sweep(engine, sizes, modes, args.batch_iters)
            print(f"  batch table: {time.perf_counter() - t_b:.1f} s", flush=True)
            save()
            compiled_dtypes = [d for d, c in modes if c]
            if args.profile_batch > 0 and compiled_dtypes:
                t_p = time.perf_counter()
                result["profile"] = profile_batch(engine, args.profile_batch,
                                                  [(compiled_dtypes[0], False), (compiled_dtypes[0], True)])
                print(f"  profiles: {time.perf_counter() - t_p:.1f} s", flush=True)
            save()
        if "ramp" not in skip:
            print("ramp:", flush=True)
            result["ramp"] = []
            graphs = compiled_graphs()
            asyncio.run(ramp(engine, [int(x) for x in args.levels.split(",") if x], args, result["ramp"], save))
            print(f"  graphs compiled during the ramp: {compiled_graphs() - graphs}", flush=True)
            result["cuda_graphs_after_ramp"] = decoder_graphs(engine)
            if args.cuda_graphs:
                print(f"  decoder CUDA graphs after the ramp: {result['cuda_graphs_after_ramp']}", flush=True)
    finally:
        engine.close()
        save()
        if result.get("ramp"):
            try:
                png = out.with_suffix(".png")
                plot_ramp(png, result["ramp"], f"Kokoro-82M on {result['environment'].get('gpu', 'cpu')}, "
                                               f"{result['engine']['decoder_dtype']}, commit {git_commit()[:8]}")
                print(f"wrote {png}", flush=True)
            except ImportError:
                print("no matplotlib: the ramp's PNG is not drawn", flush=True)
        print(f"wrote {out}; max streams with p1 reply ratio >= 1.2: {result.get('max_streams_ok')}; "
              f"{compiled_graphs()} compiled graphs in all; {time.perf_counter() - t0:.0f} s in all", flush=True)

if __name__ == "__main__":
    main()
