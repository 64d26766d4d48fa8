"""N real-time callers through the project's real streaming path: ``StreamBatcher`` + ``ParakeetEngine``.

Usage (device): PYTHONPATH=. python3 bench/streaming_batcher.py --callers 256,384,512,640,768,896 --out DIR
Usage (CPU smoke, tiny model): PYTHONPATH=. python3 bench/streaming_batcher.py --device cpu --callers 1,4 --duration 3

Without flags it measures what the agent runs (``agent.config.ASRConfig`` / ``cadence serve``): 10 s left
context, 160 ms chunks, a partial every ``StreamConfig.partial_interval_ms`` (640 ms) per caller,
staggered, finals first in each tick, encoder profiles derived as the agent derives them
(``asr.parakeet.batcher.stream_encoder_profiles``: full and half windows), ``max_batch`` 256, the
0.5 ms GIL switch interval. Runs 9-16 used ``--left-context 2.0 --partial-interval-ms 0 --profiles
<2 s set>`` (a partial every chunk); those flags reproduce them. Every caller count is run
``--passes`` times in a row (default 2: the first, cold, pass and a warm one) and every pass is
reported; the summary's claim is the worst pass, never the best.

Each caller is an asyncio task with its own ``StreamSession``: it feeds 160 ms chunks of the speech-like
signal of the other benches (``bench.common.random_audio``) on the wall clock, talks ~4 s, calls
``finalize`` at the end of speech and pauses ~1 s; starts are staggered (a random phase within a chunk
and a random point of the talk/pause cycle). Measured in a window that skips the first second:

- newest chunk -> partial: from the due time (last sample spoken) of the newest chunk a partial covers
  to that partial reaching the caller's callback: how late the batcher delivers a partial once due
  (with partials every chunk, as before run 17, that is every chunk's latency);
- end of speech -> final: from the utterance's last chunk's due time to ``finalize`` returning;
- batch per tick, ticks/s, how late the callers' feeds ran (event loop saturation), CPU use;
- where each tick's time goes: host perf counters and CUDA events around the batcher's worker call and
  the engine's stages (features, encoder, decoder load + loop, tokens to the host), installed as
  instance attributes (the modules are not changed).

On CUDA the engine is the v3-sized random model (bf16 ``cuda_graphs`` encoder profiles, graph decoder,
device carry bank); on the CPU a tiny model (eager encoder, plain loop) for smoke runs. Unlike
bench/streaming_sim.py (its own engine and GPU-side windows), this is the agent's code path: numpy
windows per session, ``pad_batch``, a host-to-device copy, log-mel, encoder replay, banked decode, host
tokens, session bookkeeping on the event loop. The sweep stops once p99 final exceeds ``--stop-ms``.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import logging
import os
import random
import subprocess
import sys
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make the repository root importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np
import torch

from asr.parakeet.batcher import StreamBatcher, stream_encoder_profiles
from asr.parakeet.engine import ParakeetEngine
from asr.parakeet.streaming import StreamConfig, StreamResult
from bench.common import random_audio, write_result
from bench.stream_engine import tiny_engine, v3_engine

log = logging.getLogger("streaming_batcher")
SR = 16000


# ---------------------------------------------------------------------------- per-tick profile
@dataclass
class TickRecord:
    """One batcher tick: jobs taken, windows encoded, and time marks (host perf counter, CUDA event)."""

    jobs: int
    start: float
    end: float = 0.0
    windows: int = 0
    marks: dict[str, tuple[float, Any]] = field(default_factory=dict)


class _Around:
    """Calls ``before``/``after`` around a callable; other attributes pass through."""

    def __init__(self, inner: Any, before: Callable[[], None], after: Callable[[], None]) -> None:
        self._inner, self._before, self._after = inner, before, after

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        self._before()
        try:
            return self._inner(*args, **kwargs)
        finally:
            self._after()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


class TickProfiler:
    """Times every tick of ``batcher`` by stage (only while ``recording``).

    Marks: ``start``/``end`` around ``StreamBatcher.process`` (the worker thread), ``features``,
    ``encoder``, ``decoder`` (``decode``/``decode_banked``: load, loop, tokens to host, carry store) and
    ``loop`` (the graph decoder's loop, or the plain loop). CUDA events sit on the current stream, so
    their differences are spans of the GPU timeline; nothing here synchronises.
    """

    def __init__(self, batcher: StreamBatcher, engine: ParakeetEngine) -> None:
        self.cuda = engine.device.type == "cuda"
        self.records: list[TickRecord] = []
        self.recording = False
        self._current: TickRecord | None = None
        self._install(batcher, engine)

    def mark(self, name: str) -> None:
        rec = self._current
        if rec is None:
            return
        event = None
        if self.cuda:
            event = torch.cuda.Event(enable_timing=True)
            event.record()
        rec.marks[name] = (time.perf_counter(), event)

    def _around(self, fn: Any, name: str) -> _Around:
        return _Around(fn, lambda: self.mark(name + "0"), lambda: self.mark(name + "1"))

    def _install(self, batcher: StreamBatcher, engine: ParakeetEngine) -> None:
        tick, process = batcher._tick, batcher.process

        async def timed_tick(jobs: list[Any]) -> None:
            rec = TickRecord(len(jobs), time.perf_counter())
            self._current = rec
            try:
                await tick(jobs)
            finally:
                rec.end = time.perf_counter()
                self._current = None
                if self.recording:
                    self.records.append(rec)

        def timed_process(requests: list[Any], slots: list[int] | None = None) -> Any:
            if self._current is not None:
                self._current.windows = len(requests)
            self.mark("start")
            try:
                return process(requests, slots)
            finally:
                self.mark("end")

        staging = getattr(batcher, "_staging", None)  # process() stages windows into a reused pinned buffer
        if staging is not None:
            staging.stage = self._around(staging.stage, "pad")  # type: ignore[method-assign]
        else:  # older batchers called the module's pad_batch
            import asr.parakeet.batcher as batcher_module

            if not isinstance(batcher_module.pad_batch, _Around):
                batcher_module.pad_batch = self._around(batcher_module.pad_batch, "pad")  # type: ignore[assignment]
        batcher._tick = timed_tick  # type: ignore[method-assign]
        batcher.process = timed_process  # type: ignore[method-assign]
        if getattr(engine, "graphed_features", False):  # log-mel captured in the encoder's graphs
            engine.encode = self._around(engine.encode, "encoder")  # type: ignore[method-assign]
        else:
            engine.features = self._around(engine.features, "features")  # type: ignore[assignment]
            engine.encoder = self._around(engine.encoder, "encoder")  # type: ignore[assignment]
        engine.decode = self._around(engine.decode, "decoder")  # type: ignore[method-assign]
        engine.decode_banked = self._around(engine.decode_banked, "decoder")  # type: ignore[method-assign]
        if engine.graph_decoder is not None:
            engine.graph_decoder.loop = self._around(engine.graph_decoder.loop, "loop")  # type: ignore[method-assign]
        else:
            engine.decoder.run = self._around(engine.decoder.run, "loop")  # type: ignore[method-assign]

    def spans(self) -> list[dict[str, float]]:
        """Per recorded tick: wall times (ms) of the tick, the worker call and each stage."""
        if self.cuda:
            torch.cuda.synchronize()
        out = []
        for rec in self.records:
            m = rec.marks
            row = {"jobs": float(rec.jobs), "windows": float(rec.windows), "tick_ms": (rec.end - rec.start) * 1e3}

            def host(a: str, b: str, m: dict[str, tuple[float, Any]] = m) -> float | None:
                return (m[b][0] - m[a][0]) * 1e3 if a in m and b in m else None

            def gpu(a: str, b: str, m: dict[str, tuple[float, Any]] = m) -> float | None:
                return m[a][1].elapsed_time(m[b][1]) if a in m and b in m and m[a][1] is not None else None

            first = "features0" if "features0" in m else "encoder0"  # features graphed with the encoder: none
            values = {
                "worker_ms": host("start", "end"),
                "host_pad_h2d_ms": host("start", first),  # staging + copy to the device (+ decode planning)
                "host_pad_ms": host("pad0", "pad1"),  # staging: numpy windows -> one [B, N] host tensor
                "host_h2d_ms": host("pad1", first),  # copy enqueue (+ host frame counts, bank rows to the device)
                "host_features_ms": host("features0", "features1"),
                "host_encoder_ms": host("encoder0", "encoder1"),
                "host_frames_ms": host("encoder1", "decoder0"),  # window bookkeeping (lengths: on the host)
                "host_decoder_ms": host("decoder0", "decoder1"),
                "host_loop_ms": host("loop0", "loop1"),
                "host_after_ms": host("decoder1", "end"),
                "gpu_features_ms": gpu("features0", "features1"),
                "gpu_encoder_ms": gpu("encoder0", "encoder1"),
                "gpu_decoder_load_ms": gpu("decoder0", "loop0"),  # prepare + carry-bank gather
                "gpu_decoder_loop_ms": gpu("loop0", "loop1"),
                "decoder_collect_ms": gpu("loop1", "decoder1"),  # tokens to host (sync) + carry-bank scatter
                "gpu_worker_ms": gpu("start", "end"),
            }
            row.update({k: v for k, v in values.items() if v is not None})
            out.append(row)
        return out


def summarize_ticks(rows: list[dict[str, float]], cuda: bool) -> dict[str, Any]:
    """Means and p50/p99 of every span, plus the tick split into encoder / decoder / host glue."""
    if not rows:
        return {}
    keys = sorted({k for r in rows for k in r})
    stats: dict[str, Any] = {}
    for key in keys:
        values = [r[key] for r in rows if key in r]
        stats[key] = {"mean": float(np.mean(values)), "p50": float(np.percentile(values, 50)),
                      "p99": float(np.percentile(values, 99))}

    def mean(key: str) -> float:
        return stats[key]["mean"] if key in stats else 0.0

    tick = mean("tick_ms")
    if cuda:  # GPU timeline spans; everything else in the tick is host work or waiting on it
        encoder = mean("gpu_features_ms") + mean("gpu_encoder_ms")
        decoder = mean("gpu_decoder_load_ms") + mean("gpu_decoder_loop_ms")
    else:  # synchronous CPU: host spans are the compute
        encoder = mean("host_features_ms") + mean("host_encoder_ms")
        decoder = mean("host_decoder_ms")
    split = {
        "tick_ms": tick,
        "encoder_ms": encoder,  # log-mel + encoder (+ profile padding / copies)
        "decoder_ms": decoder,  # state load + bank gather + loop
        "host_glue_ms": tick - encoder - decoder,
        "of_which_pad_h2d_ms": mean("host_pad_h2d_ms"),
        "of_which_event_loop_ms": tick - mean("worker_ms"),  # next_request, apply, text, callbacks, thread hop
        "of_which_collect_ms": mean("decoder_collect_ms") if cuda else 0.0,
    }
    windows = max(mean("windows"), 1e-9)  # per encoded window: what grows with the batch
    per_window = {name: 1e3 * value / windows for name, value in (
        ("tick", tick), ("encoder", encoder), ("decoder", decoder), ("pad", mean("host_pad_ms")),
        ("h2d", mean("host_h2d_ms")), ("event_loop", split["of_which_event_loop_ms"]))}
    return {"split_mean_ms": split, "per_window_us": per_window, "spans": stats}


# ---------------------------------------------------------------------------- callers
@dataclass
class Load:
    """The callers' behaviour."""

    chunk_s: float = 0.16
    talk_s: float = 4.0
    pause_s: float = 1.0
    jitter: float = 0.1  # talk and pause times vary by up to +-10% per utterance
    warm_s: float = 1.0  # not measured at the start of a run
    tail_s: float = 0.5  # callers keep talking this long after the window (steady load for the last finals)
    final_timeout_s: float = 10.0


def pct(values: Sequence[float], q: float) -> float | None:
    return float(np.percentile(values, q)) if len(values) else None


async def run_load(batcher: StreamBatcher, profiler: TickProfiler, clips: np.ndarray, callers: int,
                   duration_s: float, load: Load, seed: int) -> dict[str, Any]:
    """``callers`` real-time callers for ``duration_s`` (+ tail); latencies of chunks and utterances due in the window."""
    loop = asyncio.get_running_loop()
    clock = time.perf_counter
    rng = np.random.default_rng(seed)
    chunk = round(load.chunk_s * SR)
    spf = batcher.config.samples_per_frame
    cycle = load.talk_s + load.pause_s
    phase = rng.uniform(0.0, load.chunk_s, callers)
    cycle_at = rng.uniform(0.0, cycle, callers)
    first_pos = rng.integers(0, clips.shape[1] - chunk, callers)
    start = clock() + 0.05
    measure_from, stop = start + load.warm_s, start + duration_s
    hard_stop = stop + load.tail_s
    partial_ms: list[float] = []
    final_ms: list[float] = []
    late_ms: list[float] = []
    counts = {"chunks": 0, "utterances": 0, "errors": 0, "timeouts": 0, "nonfinal_chunks": 0}
    sent_nonfinal = np.zeros(callers, dtype=np.int64)
    partials_got = np.zeros(callers, dtype=np.int64)
    tokens_final: list[int] = []
    first_error: list[str] = []

    def in_window(due: float) -> bool:
        return measure_from <= due <= stop

    async def caller(i: int) -> None:
        jitter = random.Random(seed * 100_003 + i)
        clip = clips[i % len(clips)]
        pos = int(first_pos[i])
        pending: deque[tuple[int, float]] = deque()  # (utterance sample where a chunk ends, its due time)

        def on_partial(result: StreamResult) -> None:
            now = clock()
            partials_got[i] += 1
            covered = session.decoded_frames * spf
            newest = None
            while pending and pending[0][0] <= covered:
                _, newest = pending.popleft()
            if newest is not None and in_window(newest):
                partial_ms.append((now - newest) * 1e3)

        session = batcher.open(on_partial=on_partial)
        t = start + phase[i]
        if cycle_at[i] < load.talk_s:
            talk = load.talk_s - cycle_at[i]
        else:
            t += cycle - cycle_at[i]
            talk = load.talk_s
        try:
            while True:
                n = max(1, round(talk / load.chunk_s))
                due = t
                for k in range(n):
                    due += load.chunk_s
                    delay = due - clock()
                    await asyncio.sleep(delay if delay > 0 else 0)
                    now = clock()
                    if now >= hard_stop:
                        return
                    if pos + chunk > len(clip):
                        pos = 0
                    batcher.feed(session, clip[pos : pos + chunk])
                    pos += chunk
                    pending.append((session.total_samples, due))
                    if k < n - 1:
                        sent_nonfinal[i] += 1
                    if in_window(due):
                        late_ms.append((now - due) * 1e3)
                        counts["chunks"] += 1
                        counts["nonfinal_chunks"] += k < n - 1
                try:
                    async with asyncio.timeout(load.final_timeout_s):  # no extra task, unlike wait_for on 3.11
                        final = await batcher.finalize(session)
                    latency = (clock() - due) * 1e3
                    if in_window(due):
                        final_ms.append(latency)
                        tokens_final.append(len(final.tokens))
                except TimeoutError:
                    counts["timeouts"] += 1
                    if in_window(due):
                        final_ms.append(load.final_timeout_s * 1e3)
                except Exception as exc:  # a failed tick: count it, keep calling
                    counts["errors"] += 1
                    if not first_error:
                        first_error.append(repr(exc))
                if in_window(due):
                    counts["utterances"] += 1
                pending.clear()
                t = due + load.pause_s * jitter.uniform(1 - load.jitter, 1 + load.jitter)
                talk = load.talk_s * jitter.uniform(1 - load.jitter, 1 + load.jitter)
        finally:
            batcher.close(session)

    def recording(on: bool) -> None:
        profiler.recording = on

    loop.call_later(max(0.0, measure_from - clock()), recording, True)
    loop.call_later(max(0.0, stop - clock()), recording, False)
    profiler.records.clear()
    cpu0, wall0 = time.process_time(), clock()
    stats0 = (batcher.stats.ticks, batcher.stats.windows, batcher.stats.finals)
    await asyncio.gather(*(caller(i) for i in range(callers)))
    wall, cpu = clock() - wall0, time.process_time() - cpu0
    profiler.recording = False
    ticks = profiler.spans()
    window = stop - measure_from
    windows = [r["windows"] for r in ticks]
    eligible = sent_nonfinal > 0
    row: dict[str, Any] = {
        "callers": callers,
        "window_s": window,
        "chunks": counts["chunks"],
        "partials": len(partial_ms),
        "partial_coverage": len(partial_ms) / max(1, counts["nonfinal_chunks"]),  # partials per talking chunk
        "finals": len(final_ms),
        "utterances": counts["utterances"],
        "errors": counts["errors"],
        "timeouts": counts["timeouts"],
        "first_error": first_error[0] if first_error else None,
        "callers_without_partials": int((eligible & (partials_got == 0)).sum()),
        "tokens_per_final": float(np.mean(tokens_final)) if tokens_final else 0.0,
        "ticks": len(ticks),
        "ticks_per_s": len(ticks) / window,
        "mean_batch": float(np.mean(windows)) if windows else 0.0,
        "max_batch": int(max(windows)) if windows else 0,
        "tick_busy_fraction": sum(r["tick_ms"] for r in ticks) / 1e3 / window,
        "cpu_util": cpu / wall,
        "all_ticks": batcher.stats.ticks - stats0[0],
        "all_windows": batcher.stats.windows - stats0[1],
        "all_final_windows": batcher.stats.finals - stats0[2],
        "windows_per_s": float(np.sum(windows)) / window if windows else 0.0,
    }
    for name, values in (("partial", partial_ms), ("final", final_ms), ("feed_late", late_ms)):
        for q in (50, 95, 99):
            row[f"{name}_p{q}_ms"] = pct(values, q)
        row[f"{name}_max_ms"] = max(values) if values else None
    row["profile"] = summarize_ticks(ticks, profiler.cuda)
    return row


# ---------------------------------------------------------------------------- host-side probe
def host_probe(engine: ParakeetEngine, config: StreamConfig, batch: int, iters: int = 5) -> dict[str, Any]:
    """What one full tick's input costs on the host: ``pad_batch`` of ``batch`` windows, the pageable
    host-to-device copy the engine does, and (for comparison) a pinned non-blocking copy."""
    from asr.parakeet.engine import pad_batch

    window = config.max_window_samples
    rng = np.random.default_rng(0)
    audios = [rng.standard_normal(window).astype(np.float32) for _ in range(batch)]

    def median_ms(fn: Callable[[], Any]) -> float:
        fn()
        times = []
        for _ in range(iters):
            t0 = time.perf_counter()
            fn()
            if engine.device.type == "cuda":
                torch.cuda.synchronize()
            times.append((time.perf_counter() - t0) * 1e3)
        return float(np.median(times))

    host, _ = pad_batch(audios)
    out: dict[str, Any] = {"batch": batch, "window_samples": window, "mbytes": host.numel() * 4 / 1e6,
                           "pad_batch_ms": median_ms(lambda: pad_batch(audios)),
                           "np_stack_ms": median_ms(lambda: np.stack(audios))}
    if engine.device.type == "cuda":
        pinned = host.pin_memory()
        out["h2d_pageable_ms"] = median_ms(lambda: host.to(engine.device))
        out["h2d_pinned_ms"] = median_ms(lambda: pinned.to(engine.device, non_blocking=True))
    return out


# ---------------------------------------------------------------------------- engine and sweep
def build_engine(args: argparse.Namespace) -> tuple[ParakeetEngine, dict[str, Any]]:
    if args.model == "v3":
        if args.device != "cuda":
            raise SystemExit("the v3-sized model needs --device cuda (use --model tiny on the CPU)")
        profiles = args.profiles if args.encoder_backend == "cuda_graphs" else (args.profiles or None)
        return v3_engine(profiles=profiles, decoder_dtype=args.decoder_dtype, decoder_graph_mode=args.graph_mode,
                         encoder_backend=args.encoder_backend, graph_features=args.features == "graphed")
    backend = "eager" if args.encoder_backend == "cuda_graphs" and args.device == "cpu" else args.encoder_backend
    options: dict[str, Any] = {"profiles": args.profiles} if backend == "cuda_graphs" else {}
    engine = tiny_engine(args.device, encoder_backend=backend, decoder_dtype=args.decoder_dtype,
                         decoder_graph_mode=args.graph_mode, **options)
    return engine, {}


def intervals(args: argparse.Namespace) -> list[int]:
    """``--partial-interval-ms`` as a list: the first is swept (and claimed), the others compared."""
    return [int(v) for v in str(args.partial_interval_ms).split(",") if v.strip()]


def batcher_interval(config: StreamConfig) -> int:
    """The partial interval the batcher really uses, ms (whole chunks; a chunk for 0)."""
    return round(config.partial_frames * config.samples_per_frame * 1000 / config.sample_rate)


def git_commit() -> str | None:
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, timeout=5,
                             cwd=Path(__file__).resolve().parents[1])
        return out.stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


def row_ok(row: dict[str, Any], target_ms: float) -> bool:
    """p99 final within target, every caller got partials, nothing failed."""
    p99 = row["final_p99_ms"]
    return (p99 is not None and p99 <= target_ms and row["callers_without_partials"] == 0
            and row["errors"] == 0 and row["timeouts"] == 0)


def fmt(value: float | None, width: int = 7) -> str:
    return f"{value:{width}.1f}" if value is not None else " " * (width - 1) + "-"


def print_table(rows: list[dict[str, Any]], target_ms: float, title: str = "") -> None:
    if title:
        print(f"\n{title}")
    print(f"\n{'callers':>7} | {'partial p50 p95 p99 ms':>23} | {'final p50 p95 p99 ms':>23} | {'cover':>5} "
          f"{'batch':>6} {'tick/s':>6} | {'tick':>6} {'enc':>6} {'dec':>6} {'glue':>6} {'p+h2d':>5} {'loop':>5} "
          f"| {'late99':>6} {'cpu':>4} {'finals':>6} ok")
    for r in rows:
        split = r["profile"].get("split_mean_ms", {})
        print(f"{r['callers']:7d} | {fmt(r['partial_p50_ms'])}{fmt(r['partial_p95_ms'], 8)}{fmt(r['partial_p99_ms'], 8)} | "
              f"{fmt(r['final_p50_ms'])}{fmt(r['final_p95_ms'], 8)}{fmt(r['final_p99_ms'], 8)} | "
              f"{r['partial_coverage']:5.2f} {r['mean_batch']:6.1f} {r['ticks_per_s']:6.1f} | "
              f"{fmt(split.get('tick_ms'), 6)} {fmt(split.get('encoder_ms'), 6)} {fmt(split.get('decoder_ms'), 6)} "
              f"{fmt(split.get('host_glue_ms'), 6)} {fmt(split.get('of_which_pad_h2d_ms'), 5)} "
              f"{fmt(split.get('of_which_event_loop_ms'), 5)} | {fmt(r['feed_late_p99_ms'], 6)} {r['cpu_util']:4.2f} "
              f"{r['finals']:6d} {'yes' if row_ok(r, target_ms) else 'no'}")
    print("(tick = mean batcher tick wall ms = enc + dec + glue; enc/dec: GPU spans on CUDA; glue includes p+h2d "
          "(pad_batch + host-to-device copy) and loop (event-loop side: windows, apply, text, callbacks); "
          "partial: newest covered chunk -> partial; cover: partials per talking chunk; "
          "late99: p99 ms the callers' feeds ran late)")


def stream_config(args: argparse.Namespace, interval: int | None = None) -> StreamConfig:
    return StreamConfig(chunk_ms=args.chunk_ms, left_context_s=args.left_context,
                        partial_interval_ms=intervals(args)[0] if interval is None else interval)


async def sweep_all(args: argparse.Namespace, engine: ParakeetEngine, build: dict[str, Any]) -> dict[str, Any]:
    """The caller sweep at the first partial interval (``--passes`` passes), then one pass at each other
    interval over ``--compare-callers`` (same engine, profiles and load)."""
    first, *others = intervals(args)
    callers = [int(c) for c in args.callers.split(",") if c.strip()]
    result = await sweep(args, engine, build, first, callers, args.passes)
    compare = [int(c) for c in args.compare_callers.split(",") if c.strip()]
    result["comparisons"] = [await sweep(args, engine, {}, interval, compare, 1) for interval in others]
    return result


async def sweep(args: argparse.Namespace, engine: ParakeetEngine, build: dict[str, Any], interval: int,
                callers: list[int], passes_wanted: int) -> dict[str, Any]:
    config = stream_config(args, interval)
    carry_bank = {"auto": None, "on": True, "off": False}[args.carry_bank]
    batcher = StreamBatcher(engine, config, max_batch=args.max_batch, carry_bank=carry_bank)
    profiler = TickProfiler(batcher, engine)
    load = Load(chunk_s=args.chunk_ms / 1000, talk_s=args.talk, pause_s=args.pause, jitter=args.jitter,
                warm_s=min(1.0, args.duration / 4))
    clip_s = max(20.0, 2 * (args.talk + args.pause))
    clips = random_audio(min(args.clips, max(callers)), clip_s, seed=11, device="cpu").numpy()
    if build:  # the main sweep's (comparisons share the engine)
        build["host_probe"] = host_probe(engine, batcher.config, args.max_batch)
        print(f"host probe: {build['host_probe']}", flush=True)
    t0 = time.perf_counter()
    warm = min(64, max(callers))
    await run_load(batcher, profiler, clips, warm, min(2.0, args.duration), load, seed=10_000)  # paths warm
    build[f"warmup_run_s_{interval}ms"] = time.perf_counter() - t0
    gc.collect()
    gc.freeze()  # as the agent does after warm-up
    passes: list[dict[str, Any]] = []
    tag = f"{batcher_interval(batcher.config)} ms"
    for index in range(passes_wanted):
        label = "cold" if index == 0 else f"warm{index}"
        rows: list[dict[str, Any]] = []
        stopped = None
        for n in callers:
            row = await run_load(batcher, profiler, clips, n, args.duration, load, seed=n + 7919 * index)
            row["pass"] = label
            rows.append(row)
            split = row["profile"].get("split_mean_ms", {})
            print(f"[{tag} {label}] callers {n}: partial p99 {fmt(row['partial_p99_ms'], 1)} ms, final p50/p99 "
                  f"{fmt(row['final_p50_ms'], 1)}/{fmt(row['final_p99_ms'], 1)} ms, batch {row['mean_batch']:.1f}, "
                  f"{row['windows_per_s']:.0f} windows/s, {row['ticks_per_s']:.1f} ticks/s, tick "
                  f"{fmt(split.get('tick_ms'), 1)} ms (enc {fmt(split.get('encoder_ms'), 1)}, dec "
                  f"{fmt(split.get('decoder_ms'), 1)}, glue {fmt(split.get('host_glue_ms'), 1)}), "
                  f"errors {row['errors']}", flush=True)
            p99 = row["final_p99_ms"]
            if (p99 is not None and p99 > args.stop_ms) or row["timeouts"]:
                stopped = n
                break
        ok = [r["callers"] for r in rows if row_ok(r, args.target_ms)]
        passes.append({"pass": label, "rows": rows, "max_callers_ok": max(ok) if ok else None,
                       "stopped_at_callers": stopped})
    await batcher.aclose()
    per_pass = [p["max_callers_ok"] for p in passes]
    bank = batcher._bank
    return {
        "partial_interval_ms": interval,
        "partial_interval_used_ms": batcher_interval(batcher.config),
        "passes": passes,
        "rows": [row for p in passes for row in p["rows"]],
        # the claim: the worst pass (a pass with no caller count within target counts as 0)
        "max_callers_ok": min((m or 0) for m in per_pass) if per_pass else None,
        "max_callers_ok_per_pass": per_pass,
        "stopped_at_callers": [p["stopped_at_callers"] for p in passes],
        "stream_config": asdict(batcher.config),
        "max_window_samples": batcher.config.max_window_samples,
        "stats": asdict(batcher.stats),
        "bank_streams": bank.streams if bank is not None else None,
        "decoder_captures": engine.graph_decoder.captures if engine.graph_decoder is not None else None,
        "decoder_mode": (engine.graph_decoder.mode.value if engine.graph_decoder is not None
                         and engine.graph_decoder.mode is not None else "plain loop"),
        "carry_bank": batcher.use_carry_bank,
        "graphed_features": bool(getattr(engine, "graphed_features", False)),
    }


def warm_engine(engine: ParakeetEngine, max_batch: int, config: StreamConfig) -> dict[str, float]:
    """Compile/capture every encoder profile and the decoder graph at the largest batch and the longest
    window, before measuring (a decoder re-capture mid-sweep would stall a tick for ~1 s)."""
    times: dict[str, float] = {}
    t0 = time.perf_counter()
    if engine.graph_decoder is not None:
        frames = max(64, engine.encoded_lengths([config.max_window_samples])[0])
        engine.graph_decoder.ensure(max_batch, frames)  # before any smaller batch: one capture serves all
    times["decoder_capture_s"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    engine.warmup()  # encoder profiles (torch.compile + graph capture for cuda_graphs) + one transcription
    times["encoder_warmup_s"] = time.perf_counter() - t0
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--model", choices=["v3", "tiny"], default=None, help="default: v3 on cuda, tiny on cpu")
    parser.add_argument("--callers", default="1,64,256,512,1024")
    parser.add_argument("--duration", type=float, default=6.0, help="seconds per caller count (1 s warm-in)")
    parser.add_argument("--target-ms", type=float, default=50.0, help="p99 end of speech -> final goal")
    parser.add_argument("--stop-ms", type=float, default=200.0, help="stop the sweep past this p99 final")
    parser.add_argument("--chunk-ms", type=int, default=160)
    parser.add_argument("--left-context", type=float, default=StreamConfig.left_context_s,
                        help="seconds (the agent's asr.left_context_s; runs 9-16 used 2.0)")
    parser.add_argument("--partial-interval-ms", default=str(StreamConfig.partial_interval_ms),
                        help="a partial per caller every this many ms of audio (default: the agent's); 0: every chunk "
                             "(runs 9-16). A list: the first is swept and claimed, the others get one pass over "
                             "--compare-callers on the same engine (profiles are derived for the first)")
    parser.add_argument("--compare-callers", default="512,768", help="caller counts for the other intervals")
    parser.add_argument("--passes", type=int, default=2,
                        help="sweep the caller counts this many times in a row (cold, then warm); all reported")
    parser.add_argument("--talk", type=float, default=4.0)
    parser.add_argument("--pause", type=float, default=1.0)
    parser.add_argument("--jitter", type=float, default=0.1)
    parser.add_argument("--max-batch", type=int, default=256, help="StreamBatcher max windows per tick")
    parser.add_argument("--encoder-backend", default="cuda_graphs")
    parser.add_argument("--profiles", default=None,
                        help="cuda_graphs profiles; default: derived as the agent does "
                             "(asr.parakeet.batcher.stream_encoder_profiles); runs 13-16: bench.stream_engine's "
                             "STREAM_PROFILES with --left-context 2.0")
    parser.add_argument("--decoder-dtype", default="float32", help="the engine's default; streaming_sim used bf16")
    parser.add_argument("--graph-mode", default="auto", choices=["auto", "conditional", "graphs", "eager"])
    parser.add_argument("--features", default="graphed", choices=["graphed", "separate"],
                        help="cuda_graphs on CUDA: log-mel captured in the encoder graphs, or launched before them")
    parser.add_argument("--carry-bank", default="auto", choices=["auto", "on", "off"])
    parser.add_argument("--clips", type=int, default=32, help="distinct audio clips the callers share")
    parser.add_argument("--loop", default="auto", choices=["auto", "asyncio", "uvloop"])
    parser.add_argument("--switch-interval", type=float, default=None,
                        help="sys.setswitchinterval seconds: the GIL hand-off between the event loop and the "
                             "batcher's worker thread (default: what `cadence serve` uses, agent/runtime.py: "
                             "0.0005 for Parakeet on CUDA, else Python's 0.005)")
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    args.model = args.model or ("v3" if args.device == "cuda" else "tiny")
    if args.profiles is None and args.encoder_backend == "cuda_graphs":
        args.profiles = stream_encoder_profiles(stream_config(args), args.max_batch)
    logging.basicConfig(level=logging.WARNING)
    if args.switch_interval is None and args.device.startswith("cuda"):
        args.switch_interval = 0.0005  # agent.runtime.GPU_STREAMING_SWITCH_INTERVAL_MS (not imported: no loguru here)
    if args.switch_interval is not None:
        sys.setswitchinterval(args.switch_interval)
    if not os.environ.get("CADENCE_COMMIT"):
        os.environ["CADENCE_COMMIT"] = git_commit() or "unknown"

    t0 = time.perf_counter()
    engine, emission = build_engine(args)
    build: dict[str, Any] = {"engine_s": time.perf_counter() - t0}
    build.update(warm_engine(engine, args.max_batch, stream_config(args)))
    print(f"engine ready in {time.perf_counter() - t0:.1f} s: {build}", flush=True)

    loop_factory = None
    if args.loop in ("auto", "uvloop"):
        try:
            import uvloop

            loop_factory = uvloop.new_event_loop
        except ImportError:
            if args.loop == "uvloop":
                raise
    loop_name = "uvloop" if loop_factory is not None else "asyncio"
    with asyncio.Runner(loop_factory=loop_factory) as runner:
        result = runner.run(sweep_all(args, engine, build))
    data = {
        "config": {k: v for k, v in vars(args).items() if k != "out"},
        "load": asdict(Load(chunk_s=args.chunk_ms / 1000, talk_s=args.talk, pause_s=args.pause, jitter=args.jitter)),
        "engine": {"device": str(engine.device), "dtype": str(engine.dtype), "encoder": engine.encoder.name,
                   "decoder_dtype": args.decoder_dtype, "graph_mode": args.graph_mode},
        "event_loop": loop_name,
        "switch_interval_s": sys.getswitchinterval(),
        "pipecat_imported": "pipecat" in sys.modules,
        "build_s": build,
        "emission": emission,
        "total_s": time.perf_counter() - t0,
        **result,
    }
    path = write_result("streaming_batcher", data, args.out)
    for sweep_result in [result, *result["comparisons"]]:
        for p in sweep_result["passes"]:
            print_table(p["rows"], args.target_ms, f"partial every {sweep_result['partial_interval_used_ms']} ms, "
                        f"pass {p['pass']}: largest N ok {p['max_callers_ok']}")
    print(f"\nlargest N with p99 final <= {args.target_ms:g} ms and partials for every caller, worst of "
          f"{len(result['passes'])} passes {result['max_callers_ok_per_pass']}: {result['max_callers_ok']}  "
          f"(left context {args.left_context:g} s, chunk {args.chunk_ms} ms, partial every "
          f"{result['partial_interval_used_ms']} ms, decoder {result['decoder_mode']}, carry bank {result['carry_bank']}, "
          f"event loop {loop_name}, pipecat imported: {data['pipecat_imported']}, total {data['total_s']:.0f} s)")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
