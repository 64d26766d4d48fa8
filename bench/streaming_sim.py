"""Streaming callers in real time on the GPU engine pieces: N callers send 160 ms chunks; every chunk gets a
partial; the last chunk of each utterance gives the final. p50/p99 chunk-to-partial and end-of-speech-to-final.

Usage (device): PYTHONPATH=. python3 bench/streaming_sim.py [--out DIR] [--callers 1,64,256,512,768,1024]

This is a GPU-side simulation, not the project's batcher (which was not ready for the device run):
each tick takes the callers whose next chunk has arrived (up to the largest profile), re-encodes
each one's window (left context + chunk; the model is not cache-aware) through a captured encoder
profile, decodes the chunk's two encoder frames from each caller's carried decoder state (a device
carry bank, one graph replay for the whole batch), and copies the tokens to the host. Callers talk
for 4 s and pause for 1 s; audio is uploaded to the GPU ahead (as a transport would per frame).
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import numpy as np
import torch

from asr.parakeet.decoding.carry_bank import CarryBank
from asr.parakeet.decoding.graph_decoder import GraphDecoder
from asr.parakeet.decoding.label_looping import LabelLoopingDecoder
from asr.parakeet.encoders.fast_conformer import FastConformer
from asr.parakeet.encoders.shape_profiles import ShapeProfile, aligned_frames, select_profile
from asr.parakeet.gpu.frontend_graphs import GraphedFrontEnd, host_encoder_lengths
from asr.parakeet.gpu.log_mel import LogMel
from asr.parakeet.random_v3 import calibrated_model
from bench.common import random_audio, write_result

SR = 16000
CHUNK = 2560  # 160 ms
SPEECH_S, PAUSE_S = 4.0, 1.0


class Engine:
    """Encoder profiles + graph decoder + carry bank for up to ``max_callers`` streams."""

    def __init__(self, model: Any, left_s: float, batches: list[int], max_callers: int) -> None:
        self.window = int(left_s * SR) + CHUNK
        frames = aligned_frames(self.window // 160 + 1)
        self.profiles = [ShapeProfile(f"stream{b}", b, frames) for b in batches]
        self.logmel = LogMel().cuda()
        self.encoder = FastConformer(model.encoder, model.encoder_projector).to_device("cuda")
        self.encoder.compile_layers(dynamic=False)
        self.frontend = GraphedFrontEnd(lambda a, n: self.encoder(*self.logmel(a, n)), self.profiles)
        self.label_looping = LabelLoopingDecoder.from_model(model, dtype=torch.bfloat16)
        self.decoders = {b: GraphDecoder(self.label_looping) for b in batches}  # one graph per profile batch
        self.bank = CarryBank(self.label_looping, max_callers)
        self.enc_len = int(host_encoder_lengths(np.array([self.window]))[0])
        self.max_batch = max(batches)

    def build(self) -> float:
        t0 = time.perf_counter()
        for p in self.profiles:
            self.frontend.build(p)
        for p in self.profiles:
            self.decoders[p.batch].ensure(p.batch, self.frontend.output_frames(p))
        return time.perf_counter() - t0

    def step(self, windows: torch.Tensor, rows: torch.Tensor) -> list[list[int]]:
        """Encode ``windows`` (b, window) on the GPU, decode each chunk's frames, return tokens (host)."""
        b = windows.shape[0]
        profile = select_profile(self.profiles, b, self.window // 160 + 1)
        assert profile is not None
        pg = self.frontend.build(profile)
        encoded = self.frontend.run_profile(pg, windows, np.full(b, self.window))
        decoder = self.decoders[profile.batch]
        state = decoder.load(encoded, [self.enc_len] * b, start_frames=[self.enc_len - 2] * b)
        self.bank.load(state, rows)
        decoder.loop()
        self.bank.store(state, rows)
        return [r.tokens for r in self.label_looping.collect(state, b)]


def simulate(
    engine: Engine, audio: torch.Tensor, callers: int, duration_s: float, seed: int
) -> dict[str, Any]:
    rng = np.random.default_rng(seed)
    phase = rng.uniform(0, 0.16, callers)
    offset = rng.uniform(0, SPEECH_S + PAUSE_S, callers)
    chunks_total = int(duration_s / 0.16)

    def speaking(k: np.ndarray, i: np.ndarray) -> np.ndarray:
        return ((k * 0.16 + offset[i]) % (SPEECH_S + PAUSE_S)) < SPEECH_S

    ids = np.arange(callers)
    next_k = np.zeros(callers, dtype=np.int64)
    for _ in range(chunks_total):  # skip to each caller's first speaking chunk
        quiet = (next_k < chunks_total) & ~speaking(next_k, ids)
        if not quiet.any():
            break
        next_k[quiet] += 1
    engine.bank.reset()
    partial_ms: list[float] = []
    final_ms: list[float] = []
    batch_sizes: list[int] = []
    window = engine.window
    pad = audio.shape[1] - chunks_total * CHUNK - window
    assert pad >= 0
    span = torch.arange(window, device="cuda")
    t0 = time.perf_counter()
    while True:
        now = time.perf_counter() - t0
        live = next_k < chunks_total
        if not live.any():
            break
        arrival = phase + (next_k + 1) * 0.16
        ready = np.flatnonzero(live & (arrival <= now))
        if ready.size == 0:
            wait = float(np.min(arrival[live])) - now
            time.sleep(min(max(wait, 0.0), 0.002))
            continue
        ready = ready[np.argsort(arrival[ready])][: engine.max_batch]
        rows = torch.from_numpy(ready).cuda(non_blocking=True)
        ends = torch.from_numpy((next_k[ready] + 1) * CHUNK + window).cuda(non_blocking=True)
        windows = audio[rows[:, None], ends[:, None] - window + span[None, :]]
        engine.step(windows, rows)
        done = time.perf_counter() - t0
        lat = (done - arrival[ready]) * 1e3
        partial_ms.extend(lat.tolist())
        last = ~speaking(next_k[ready] + 1, ready)
        final_ms.extend(lat[last].tolist())
        batch_sizes.append(int(ready.size))
        nxt = next_k[ready] + 1
        for _ in range(int((PAUSE_S + 0.2) / 0.16) + 1):  # skip the pause that follows an utterance
            quiet = (nxt < chunks_total) & ~speaking(nxt, ready)
            if not quiet.any():
                break
            nxt[quiet] += 1
        next_k[ready] = nxt

    def pct(values: list[float], q: float) -> float | None:
        return float(np.percentile(values, q)) if values else None

    return {
        "callers": callers,
        "chunks": len(partial_ms),
        "finals": len(final_ms),
        "partial_p50_ms": pct(partial_ms, 50),
        "partial_p99_ms": pct(partial_ms, 99),
        "final_p50_ms": pct(final_ms, 50),
        "final_p99_ms": pct(final_ms, 99),
        "mean_batch": float(np.mean(batch_sizes)) if batch_sizes else 0.0,
        "ticks": len(batch_sizes),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default=None)
    parser.add_argument("--callers", default="1,64,256,512,768,1024")
    parser.add_argument("--left-context", type=float, default=2.0)
    parser.add_argument("--duration", type=float, default=6.0)
    parser.add_argument("--profile-batches", default="16,64,128,256")
    args = parser.parse_args()
    callers = [int(c) for c in args.callers.split(",")]
    batches = sorted(int(b) for b in args.profile_batches.split(","))

    model, emission = calibrated_model()
    engine = Engine(model, args.left_context, batches, max(callers))
    build_s = engine.build()
    chunks_total = int(args.duration / 0.16)
    samples = chunks_total * CHUNK + engine.window
    audio = random_audio(max(callers), (samples + 320) / SR, seed=11)
    audio[:, : engine.window] = 0.0  # silence before the first chunk
    simulate(engine, audio, min(64, max(callers)), 1.0, seed=0)  # warm-up
    rows: list[dict[str, Any]] = []
    for n in callers:
        row = simulate(engine, audio, n, args.duration, seed=n)
        rows.append(row)
        print(row, flush=True)
        ok = [r["callers"] for r in rows if r["final_p99_ms"] is not None and r["final_p99_ms"] <= 50.0]
        write_result(
            "streaming_sim",
            {
                "left_context_s": args.left_context,
                "chunk_ms": 160,
                "profiles": [p.spec() for p in engine.profiles],
                "build_s": build_s,
                "emission": emission,
                "rows": rows,
                "max_callers_final_p99_le_50ms": max(ok) if ok else None,
            },
            args.out,
        )
    print(
        f"\n{'callers':>8} {'partial p50':>12} {'partial p99':>12} {'final p50':>10} {'final p99':>10} {'batch':>6}"
    )
    for r in rows:
        print(
            f"{r['callers']:8d} {r['partial_p50_ms']:12.1f} {r['partial_p99_ms']:12.1f} "
            f"{r['final_p50_ms'] or float('nan'):10.1f} {r['final_p99_ms'] or float('nan'):10.1f} {r['mean_batch']:6.1f}"
        )


if __name__ == "__main__":
    main()
