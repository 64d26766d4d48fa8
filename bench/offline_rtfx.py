"""Offline RTFx end to end (host audio -> GPU features -> encoder graph -> decoder graph -> tokens on the host)
against batch size and clip length, with transformers' ``ParakeetForTDT.generate`` on the same GPU and audio.

Usage (device): PYTHONPATH=. python3 bench/offline_rtfx.py [--out DIR] [--configs 30:1,16,128;300:1,8]
The peer is given its input features already on the GPU (its feature extractor is a CPU numpy/librosa
path), so its figure excludes feature extraction and the host->device copy; ours includes both.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import numpy as np
import torch

from asr import compile_cache
from asr.parakeet.encoders.shape_profiles import ShapeProfile, aligned_frames
from asr.parakeet.gpu.fast_transcriber import GpuTranscriber
from asr.parakeet.gpu.log_mel import LogMel
from asr.parakeet.random_v3 import calibrated_model
from bench.common import host_time, random_audio, write_result

DEFAULT_CONFIGS = "30:1,16,128;300:1,8;10:1,16,128;1:1,16,128"


def parse_configs(text: str) -> list[tuple[float, list[int]]]:
    out = []
    for item in filter(None, text.split(";")):
        seconds, batches = item.split(":")
        out.append((float(seconds), [int(b) for b in batches.split(",")]))
    return out


def profile_for(seconds: float, batch: int) -> ShapeProfile:
    frames = aligned_frames(int(seconds * 16000) // 160 + 1)
    return ShapeProfile(f"{seconds:g}s_b{batch}", batch, frames)


def ours(transcriber: GpuTranscriber, audio: torch.Tensor, seconds: float, repeats: int) -> dict[str, Any]:
    batch = audio.shape[0]
    lengths = np.full(batch, audio.shape[1])
    t0 = time.perf_counter()
    transcriber.warm_up(batch, seconds)
    build_s = time.perf_counter() - t0
    transcriber.transcribe([(audio, lengths)])  # first run: lazy inits
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    results = transcriber.transcribe([(audio, lengths)] * repeats)
    torch.cuda.synchronize()
    wall = time.perf_counter() - t0
    enc_frames = (int(audio.shape[1]) // 160 - 1) // 8 + 1
    tokens = sum(len(r.tokens) for r in results)
    return {
        "build_s": round(build_s, 1),
        "wall_s": wall,
        "rtfx": batch * repeats * seconds / wall,
        "tokens_per_frame": tokens / (len(results) * enc_frames),
        "clips": len(results),
    }


def peer(model: Any, logmel: LogMel, audio: torch.Tensor, seconds: float) -> dict[str, Any]:
    batch = audio.shape[0]
    gpu_audio = audio.cuda()
    samples = torch.full((batch,), audio.shape[1], device="cuda")
    with torch.inference_mode():
        feats, frames = logmel(gpu_audio, samples)
        mask = torch.arange(feats.shape[1], device="cuda")[None] < frames[:, None]
        feats = feats.to(torch.bfloat16)
        out: dict[str, Any] = {}

        def generate() -> None:
            out["seq"] = model.generate(input_features=feats, attention_mask=mask).sequences

        iters = 1 if seconds * batch >= 1200 else 2
        timing = host_time(generate, warmup=1, iters=iters)
    seqs = out["seq"][:, 1:]
    blank = model.config.blank_token_id
    enc_frames = (int(audio.shape[1]) // 160 - 1) // 8 + 1
    return {
        "wall_s": timing["median_s"],
        "rtfx": batch * seconds / timing["median_s"],
        "tokens_per_frame": float((seqs != blank).sum()) / (batch * enc_frames),
        "steps_per_batch": int(seqs.shape[1]),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default=None)
    parser.add_argument("--configs", default=DEFAULT_CONFIGS)
    parser.add_argument(
        "--audio-seconds-per-run", type=float, default=16000.0, help="ours: repeat batches up to this"
    )
    parser.add_argument("--no-peer", action="store_true")
    args = parser.parse_args()
    configs = parse_configs(args.configs)

    model, emission = calibrated_model()
    print("emission", emission, flush=True)
    profiles = [profile_for(seconds, batch) for seconds, batches in configs for batch in batches]
    transcriber = GpuTranscriber(model, profiles)
    logmel = LogMel().cuda()
    rows: dict[str, Any] = {}
    for seconds, batches in configs:
        for batch in batches:
            key = f"{seconds:g}s_b{batch}"
            audio = random_audio(batch, seconds, seed=int(seconds) * 1000 + batch, device="cpu")
            repeats = max(1, min(8, int(args.audio_seconds_per_run // (batch * seconds))))
            row: dict[str, Any] = {"seconds": seconds, "batch": batch, "repeats": repeats}
            try:
                row["ours"] = ours(transcriber, audio, seconds, repeats)
            except Exception as exc:  # noqa: BLE001 - record and go on
                row["ours"] = {"error": repr(exc)[:500]}
            if not args.no_peer:
                try:
                    row["peer"] = peer(model, logmel, audio, seconds)
                except Exception as exc:  # noqa: BLE001
                    row["peer"] = {"error": repr(exc)[:500]}
            if "rtfx" in row.get("ours", {}) and "rtfx" in row.get("peer", {}):
                row["ours_over_peer"] = row["ours"]["rtfx"] / row["peer"]["rtfx"]
            rows[key] = row
            print(key, row, flush=True)
            write_result("offline_rtfx", {"emission": emission, "rows": rows}, args.out)
    compile_cache.save("offline-rtfx")  # after the runs: writing it is no part of any timed build

    print(
        f"\n{'config':>12} {'ours RTFx':>11} {'peer RTFx':>10} {'ratio':>7} {'ours tok/fr':>12} {'peer tok/fr':>12}"
    )
    for key, row in rows.items():
        o, p = row.get("ours", {}), row.get("peer", {})
        print(
            f"{key:>12} {o.get('rtfx', float('nan')):11.0f} {p.get('rtfx', float('nan')):10.0f} "
            f"{row.get('ours_over_peer', float('nan')):7.1f} {o.get('tokens_per_frame', float('nan')):12.3f} "
            f"{p.get('tokens_per_frame', float('nan')):12.3f}"
        )


if __name__ == "__main__":
    main()
