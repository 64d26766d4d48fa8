"""The TDT decoder alone: one CUDA graph with WHILE nodes vs step graphs + host checks vs the plain loop.

Usage (device): PYTHONPATH=. python3 bench/decoder_bench.py [--out DIR]
Inputs: 30 s clips of random audio through the v3-sized random model's encoder, joint biased to
~0.3 tokens per encoder frame. Same encoder output for every mode. Modes with the torch step bodies
must give the plain loop's tokens exactly; the fused steps (Triton cell/bookkeeping kernels) round
the predictor differently in bf16, so their token agreement with the plain loop is reported.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import torch

from asr.parakeet.decoding.graph_decoder import GraphDecoder
from asr.parakeet.decoding.label_looping import LabelLoopingDecoder
from asr.parakeet.encoders.fast_conformer import FastConformer
from asr.parakeet.gpu.frontend_graphs import host_encoder_lengths
from asr.parakeet.gpu.log_mel import LogMel
from asr.parakeet.random_v3 import calibrated_model, count_steps, tokens_per_frame
from bench.common import cuda_time, random_audio, write_result

# name -> (loop mode, step bodies); "eager" is the plain loop, the reference
MODES = {
    "eager": ("eager", "torch"),
    "conditional": ("conditional", "fused"),
    "graphs": ("graphs", "fused"),
    "conditional+torch_steps": ("conditional", "torch"),
    "graphs+torch_steps": ("graphs", "torch"),
}


def agreement(tokens: list[list[int]], reference: list[list[int]]) -> float:
    """Fraction of reference token positions where ``tokens`` has the same token (1.0: identical)."""
    same = total = 0
    for got, want in zip(tokens, reference, strict=True):
        total += max(len(got), len(want))
        same += sum(g == w for g, w in zip(got, want, strict=False))
    return same / total if total else 1.0


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default=None)
    parser.add_argument("--batches", default="1,16,128")
    parser.add_argument("--seconds", type=float, default=30.0)
    args = parser.parse_args()
    batches = [int(b) for b in args.batches.split(",")]

    model, emission = calibrated_model()
    print("emission", emission, flush=True)
    biggest = max(batches)
    audio = random_audio(biggest, args.seconds, seed=7)
    samples = torch.full((biggest,), audio.shape[1], device="cuda")
    with torch.inference_mode():
        feats, frames = LogMel().cuda()(audio, samples)
        enc = FastConformer(model.encoder, model.encoder_projector).to_device("cuda")(feats, frames).clone()
    enc_lengths = host_encoder_lengths(samples.cpu().numpy()).tolist()
    decoder = LabelLoopingDecoder.from_model(model, dtype=torch.bfloat16)

    rows: dict[str, Any] = {}
    for batch in batches:
        e, lens = enc[:batch], enc_lengths[:batch]
        row: dict[str, Any] = {}
        reference = None
        for mode, (loop_mode, step) in MODES.items():
            graph = GraphDecoder(decoder, mode=loop_mode, step=step)
            t0 = time.perf_counter()
            graph.ensure(batch, e.shape[1])
            build_s = time.perf_counter() - t0
            iters = 2 if mode == "eager" and batch >= 128 else 5
            timing = cuda_time(lambda graph=graph, e=e, lens=lens: graph.run(e, lens), warmup=1, iters=iters)
            results, _ = graph.decode(e, lens)
            tokens = [r.tokens for r in results]
            if reference is None:
                reference = tokens
                state = graph.load(e, lens)
                outer, inner = count_steps(decoder, state)
                row["outer_steps"], row["inner_steps"] = outer, inner
                row["tokens_per_frame"] = tokens_per_frame(results, lens)
                row["tokens_per_clip"] = sum(len(t) for t in tokens) / batch
            row[mode] = {
                "actual_mode": graph.mode.value if graph.mode else None,
                "build_s": round(build_s, 3),
                "median_ms": timing["median_s"] * 1e3,
                "us_per_step": timing["median_s"] * 1e6 / max(1, row["outer_steps"] + row["inner_steps"]),
                "step": graph.step,
                "identical_tokens": tokens == reference,
                "token_agreement": agreement(tokens, reference),
            }
            print(batch, mode, row[mode], flush=True)
        eager = row["eager"]["median_ms"]
        row["speedup_conditional_vs_eager"] = eager / row["conditional"]["median_ms"]
        row["speedup_graphs_vs_eager"] = eager / row["graphs"]["median_ms"]
        row["speedup_conditional_vs_graphs"] = row["graphs"]["median_ms"] / row["conditional"]["median_ms"]
        row["speedup_fused_vs_torch_steps"] = (
            row["conditional+torch_steps"]["median_ms"] / row["conditional"]["median_ms"]
        )
        rows[f"batch{batch}"] = row
        write_result(
            "decoder_bench", {"seconds_per_clip": args.seconds, "emission": emission, "rows": rows}, args.out
        )

    print(
        f"\n{'batch':>6} {'cond ms':>9} {'graphs ms':>10} {'eager ms':>10} {'cond/eager':>11} {'tok/frame':>10} "
        f"{'steps':>7} {'cond torch-steps ms':>20} {'agree':>7}"
    )
    for name, row in rows.items():
        print(
            f"{name[5:]:>6} {row['conditional']['median_ms']:9.2f} {row['graphs']['median_ms']:10.2f} "
            f"{row['eager']['median_ms']:10.2f} {row['speedup_conditional_vs_eager']:10.1f}x "
            f"{row['tokens_per_frame']:10.3f} {row['outer_steps'] + row['inner_steps']:7d} "
            f"{row['conditional+torch_steps']['median_ms']:20.2f} {row['conditional']['token_agreement']:7.4f}"
        )


if __name__ == "__main__":
    main()
