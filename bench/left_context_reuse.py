"""What reusing the unchanged left context of a stream window could save (issue 18, item 2), on the CPU.

Usage: PYTHONPATH=. python3 bench/left_context_reuse.py [--batch 16] [--iters 5] [--out DIR]

At the agent's settings a window is 10 s of left context + 640 ms of new audio (+ a chunk of slack).
Only the raw log-mel (STFT, mel filterbank, log) of the left context is provably identical from one
window to the next (tests/parakeet/test_left_context_reuse.py): Parakeet's per-feature normalization
changes every feature frame, so the conv subsampling and the conformer must be recomputed. This times,
on the tiny model (2 layers, width 64, fp32, eager FastConformer), the stages of one window batch and
reports the share a raw log-mel cache would remove; the subsampling share is printed too (reusable
only by a checkpoint without per-feature normalization). The tiny model's conformer is ~1,000x
smaller than the v3-sized one, so its shares overstate the v3's; the v3 FLOP shares are printed
beside them (bench/results/NOTES.md: 1.23 GFLOP per encoder frame for 24 layers, subsampling
7.7 GFLOP per 30 s).
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np
import torch

from asr.parakeet.encoders.fast_conformer import FastConformer
from asr.parakeet.features import FeatureConfig, LogMelFeatures
from asr.parakeet.streaming import StreamConfig
from bench.common import random_audio, write_result
from bench.stream_engine import tiny_model

V3_LAYERS_GFLOP_PER_FRAME = 1.23  # 24 layers, per encoder frame (NOTES.md, "The two numbers")
V3_SUBSAMPLING_GFLOP_PER_S = 7.7 / 30.0


def median_ms(fn: Callable[[], Any], iters: int) -> float:
    fn()
    times = []
    for _ in range(iters):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return float(np.median(times))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--iters", type=int, default=5)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    torch.set_num_threads(max(1, torch.get_num_threads()))
    config = StreamConfig()
    window = config.max_window_samples
    new = (config.partial_frames + config.chunk_frames) * config.samples_per_frame
    audio = random_audio(args.batch, window / 16000, seed=3, device="cpu")[:, :window].contiguous()
    lengths = torch.full((args.batch,), window, dtype=torch.long)
    raw = LogMelFeatures(dataclasses.replace(FeatureConfig(), normalize="none"))
    feats = LogMelFeatures(FeatureConfig())
    model = tiny_model(0, blank_bias=0.0)
    fast = FastConformer(model.encoder, model.encoder_projector, dtype=torch.float32)
    f, n = feats(audio, lengths)
    with torch.inference_mode():
        t = {
            "raw_logmel_ms": median_ms(lambda: raw(audio, lengths), args.iters),
            "features_ms": median_ms(lambda: feats(audio, lengths), args.iters),
            "subsampling_ms": median_ms(lambda: fast._subsample(f, n), args.iters),
            "encoder_ms": median_ms(lambda: fast(f, n, eager=True), args.iters),
        }
    total = t["features_ms"] + t["encoder_ms"]
    left_share = 1.0 - new / window  # the part of the window that repeats
    enc_frames = -(-window // config.samples_per_frame)
    v3_layers = V3_LAYERS_GFLOP_PER_FRAME * enc_frames
    v3_sub = V3_SUBSAMPLING_GFLOP_PER_S * window / 16000
    logmel_gflop = (enc_frames * 8) * (5 * 512 * 9 + 257 * 128 * 2) / 1e9  # FFT + mel matmul per feature frame
    data = {
        "window_s": window / 16000, "new_audio_s": new / 16000, "batch": args.batch, "threads": torch.get_num_threads(),
        "tiny_ms": t, "tiny_total_ms": total,
        "tiny_share_removed_by_raw_logmel_cache": left_share * t["raw_logmel_ms"] / total,
        "tiny_share_subsampling_left_context": left_share * t["subsampling_ms"] / total,
        "v3_gflop_per_window": {"layers": v3_layers, "subsampling": v3_sub, "logmel": logmel_gflop},
        "v3_share_removed_by_raw_logmel_cache": left_share * logmel_gflop / (v3_layers + v3_sub + logmel_gflop),
        "v3_share_subsampling_left_context": left_share * v3_sub / (v3_layers + v3_sub + logmel_gflop),
    }
    print(f"window {data['window_s']:.2f} s ({data['new_audio_s']:.2f} s new) x {args.batch}, tiny model, CPU:")
    for key, value in t.items():
        print(f"  {key:16s} {value:8.1f}")
    print(f"  a raw log-mel cache of the left context would remove {100 * data['tiny_share_removed_by_raw_logmel_cache']:.1f}% "
          f"of features + encoder (tiny); v3 FLOPs: {100 * data['v3_share_removed_by_raw_logmel_cache']:.2f}%")
    print(f"  left-context subsampling (reusable only without per-feature normalization): "
          f"{100 * data['tiny_share_subsampling_left_context']:.1f}% (tiny), "
          f"{100 * data['v3_share_subsampling_left_context']:.2f}% of v3 FLOPs")
    print(f"wrote {write_result('left_context_reuse_cpu', data, args.out)}")


if __name__ == "__main__":
    main()
