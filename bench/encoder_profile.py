"""Where the encoder's time goes: per-kernel CUDA time of one compiled front-end call (no graph).

Usage (device): PYTHONPATH=. python3 bench/encoder_profile.py [--out DIR] [--batch 128 --seconds 30]
"""

from __future__ import annotations

import argparse
from collections import defaultdict
from typing import Any

import torch
from torch.profiler import ProfilerActivity, profile

from asr.parakeet.encoders.fast_conformer import FastConformer
from asr.parakeet.encoders.shape_profiles import aligned_frames
from asr.parakeet.gpu.log_mel import LogMel
from bench.common import cuda_time, make_model, random_audio, write_result

CATEGORIES = (
    ("attention", ("fmha", "attention", "flash", "efficient")),
    ("gemm", ("gemm", "sm90", "cutlass", "cublas", "nvjet", "matmul")),
    ("conv", ("conv", "cudnn", "implicit", "winograd", "depthwise")),
    ("fft/features", ("fft", "stft", "regular_fft", "vector_fft")),
    ("triton (fused elementwise/norm)", ("triton",)),
)


def category(name: str) -> str:
    low = name.lower()
    for label, keys in CATEGORIES:
        if any(k in low for k in keys):
            return label
    return "other"


def numerics(model: torch.nn.Module, fast: FastConformer, logmel: LogMel) -> dict[str, float]:
    """Relative error on valid frames of 2 clips (30 s, 18 s) against transformers' encoder in fp32."""
    import copy

    audio = random_audio(2, 30.0, seed=5)
    lengths = torch.tensor([480000, 288000], device="cuda")
    audio[1, 288000:] = 0
    with torch.inference_mode():
        feats, frames = logmel(audio, lengths)
        mask = torch.arange(feats.shape[1], device="cuda")[None] < frames[:, None]
        ref_model = copy.deepcopy(model).float()
        ref = ref_model.get_audio_features(input_features=feats, attention_mask=mask).pooler_output.float()
        del ref_model
        hf_bf16 = model.get_audio_features(
            input_features=feats.bfloat16(), attention_mask=mask
        ).pooler_output.float()
        ours = fast(feats, frames).float()
    valid = [375, 225]

    def err(x: torch.Tensor) -> float:
        num = sum(float((x[i, :n] - ref[i, :n]).norm() ** 2) for i, n in enumerate(valid))
        den = sum(float(ref[i, :n].norm() ** 2) for i, n in enumerate(valid))
        return (num / den) ** 0.5

    return {"transformers_bf16_vs_fp32": err(hf_bf16), "ours_bf16_vs_fp32": err(ours)}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default=None)
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--cudnn-benchmark", action="store_true")
    args = parser.parse_args()
    torch.backends.cudnn.benchmark = args.cudnn_benchmark

    model = make_model()
    fast = (
        FastConformer(model.encoder, model.encoder_projector).to_device("cuda").compile_layers(dynamic=False)
    )
    logmel = LogMel().cuda()
    frames = aligned_frames(int(args.seconds * 16000) // 160 + 1)
    samples = (frames - 1) * 160
    audio = random_audio(args.batch, samples / 16000, seed=3)
    lengths = torch.full((args.batch,), int(args.seconds * 16000), device="cuda")

    def step() -> torch.Tensor:
        with torch.inference_mode():
            return fast(*logmel(audio, lengths))

    timing = cuda_time(step, warmup=3, iters=5)
    parity = numerics(model, fast, logmel)
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        step()
        torch.cuda.synchronize()
    totals: dict[str, float] = defaultdict(float)
    kernels: list[tuple[float, str, int]] = []
    for evt in prof.key_averages():
        cuda_us = getattr(evt, "self_device_time_total", 0.0) or getattr(evt, "self_cuda_time_total", 0.0)
        if cuda_us <= 0:
            continue
        kernels.append((cuda_us, evt.key, evt.count))
        totals[category(evt.key)] += cuda_us
    kernels.sort(reverse=True)
    total = sum(totals.values())
    audio_s = args.batch * args.seconds
    result: dict[str, Any] = {
        "batch": args.batch,
        "seconds": args.seconds,
        "frames": frames,
        "cudnn_benchmark": args.cudnn_benchmark,
        "eager_launch_median_ms": timing["median_s"] * 1e3,
        "numerics_rel_err_valid_frames": parity,
        "rtfx_unGraphed": audio_s / timing["median_s"],
        "kernel_total_ms": total / 1e3,
        "by_category_ms": {k: v / 1e3 for k, v in sorted(totals.items(), key=lambda kv: -kv[1])},
        "top_kernels": [{"ms": us / 1e3, "calls": n, "name": name[:160]} for us, name, n in kernels[:25]],
    }
    write_result(f"encoder_profile_b{args.batch}_{args.seconds:g}s", result, args.out)
    print(f"numerics vs transformers fp32 (valid frames): {parity}")
    print(f"kernel time {total / 1e3:.1f} ms per call ({audio_s / (total / 1e6):.0f}x real time)")
    for label, ms in result["by_category_ms"].items():
        print(f"  {label:34s} {ms:8.2f} ms  {100 * ms / (total / 1e3):5.1f}%")
    for k in result["top_kernels"][:15]:
        print(f"  {k['ms']:8.2f} ms {k['calls']:5d}x {k['name'][:100]}")


if __name__ == "__main__":
    main()
