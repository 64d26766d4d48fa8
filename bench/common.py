"""Shared benchmark helpers: the v3-sized random-weight model, emission calibration, timing, results.

Benchmarks run on the device machine with its own python (torch, transformers, no pipecat), so
nothing here imports pipecat or the agent runtime.
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from asr.parakeet.tiny import NO_DROPOUT

RESULTS_DIR = Path(__file__).resolve().parent / "results"
SAMPLE_RATE = 16000
BLANK = 8192
DURATIONS = (0, 1, 2, 3, 4)

# Parakeet-TDT 0.6B v3: 24 FastConformer blocks d=1024, 128 mels, no biases, xscaling off; 2x640 LSTM.
V3_ENCODER = dict(
    hidden_size=1024,
    num_hidden_layers=24,
    num_attention_heads=8,
    intermediate_size=4096,
    hidden_act="silu",
    attention_bias=False,
    convolution_bias=False,
    conv_kernel_size=9,
    subsampling_factor=8,
    subsampling_conv_channels=256,
    num_mel_bins=128,
    subsampling_conv_kernel_size=3,
    subsampling_conv_stride=2,
    scale_input=False,
    **NO_DROPOUT,
)


def tdt_config(encoder_overrides: dict[str, Any] | None = None, **overrides: Any) -> Any:
    from transformers import ParakeetTDTConfig

    enc = {**V3_ENCODER, **(encoder_overrides or {})}
    kwargs: dict[str, Any] = dict(
        encoder_config=enc,
        vocab_size=BLANK + 1,
        decoder_hidden_size=640,
        num_decoder_layers=2,
        hidden_act="relu",
        max_symbols_per_step=10,
        durations=list(DURATIONS),
        blank_token_id=BLANK,
    )
    kwargs.update(overrides)
    return ParakeetTDTConfig(**kwargs)


def make_model(
    device: str = "cuda", dtype: torch.dtype = torch.bfloat16, seed: int = 0, config: Any = None
) -> Any:
    """A ``ParakeetForTDT`` with random weights (initialised on the device: seconds, not minutes)."""
    from transformers import ParakeetForTDT

    config = config or tdt_config()
    torch.manual_seed(seed)
    with torch.device(device):
        model = ParakeetForTDT(config)
    model = model.to(dtype).eval()
    with torch.no_grad():  # the blank row is the start symbol's zero embedding, as in the real checkpoints
        model.decoder.embedding.weight[config.blank_token_id].zero_()
    gen = model.generation_config
    gen.decoder_start_token_id = config.blank_token_id
    gen.pad_token_id = config.blank_token_id
    gen.bos_token_id = config.blank_token_id
    gen.eos_token_id = None
    return model


@torch.no_grad()
def calibrate_emission(
    model: Any,
    enc_proj: torch.Tensor,
    token_prob: float = 0.6,
    duration_probs: tuple[float, ...] = (0.01, 0.05, 0.15, 0.6, 0.19),
    duration_margin: float = 30.0,
    fixed_duration: int | None = 3,
) -> dict[str, Any]:
    """Bias the joint so a random-weight model decodes like speech (see PARAKEET.md).

    ``enc_proj`` (N, 640) joint-projected encoder frames. With ``fixed_duration`` (default 3) every
    step jumps that many frames: 125 decoder steps per 30 s clip, the workload of the reference
    measurement of transformers' ``generate`` in PARAKEET.md (~126), whatever the random weights
    do after the first tokens (spreading durations by ``duration_probs`` at the start state proved
    fragile: 94 to 375 steps per clip across runs). After this, a token beats blank on about
    ``token_prob`` of frames (at the start state), duration argmaxes follow ``duration_probs``,
    and every duration logit sits ``duration_margin`` below the token logits, so transformers'
    argmax over all logits picks the same next token as NeMo's token-only argmax.
    """
    cfg = model.config
    vocab = cfg.vocab_size  # includes blank
    blank = cfg.blank_token_id
    head = model.joint.head
    ids = torch.full((1, 1), blank, dtype=torch.long, device=enc_proj.device)
    dec = model.decoder(ids)[0, 0]  # (640,) start state
    act = torch.relu(enc_proj.float() + dec.float())
    logits = act @ head.weight.float().t() + head.bias.float()
    tok_max = logits[:, :blank].max(-1).values
    shift = torch.quantile(tok_max - logits[:, blank], 1.0 - token_prob)
    bias = head.bias.detach().float().clone()
    bias[blank] += shift
    target = torch.tensor(duration_probs, device=logits.device)
    dur = logits[:, vocab:].clone()
    dur_bias = torch.zeros(len(duration_probs), device=logits.device)
    for _ in range(60):
        counts = torch.bincount((dur + dur_bias).argmax(-1), minlength=len(duration_probs)).float() + 0.5
        dur_bias += 0.5 * torch.log(target / (counts / counts.sum()))
    bias[vocab:] += dur_bias
    top = (logits[:, :vocab] + (bias - head.bias.float())[:vocab]).max(-1).values
    low = (logits[:, vocab:] + (bias - head.bias.float())[vocab:]).max(-1).values
    bias[vocab:] -= float((low - top).max().clamp(min=0)) + duration_margin
    if fixed_duration is not None:  # constant duration logits: the argmax is always fixed_duration
        head.weight[vocab:] = 0
        bias[vocab:] = float(top.min()) - duration_margin
        bias[vocab + DURATIONS.index(fixed_duration)] += 1.0
    head.bias.copy_(bias.to(head.bias.dtype))
    return {
        "blank_shift": float(shift),
        "duration_bias": [float(x) for x in dur_bias],
        "token_prob": token_prob,
        "fixed_duration": fixed_duration,
    }


def random_audio(batch: int, seconds: float, seed: int = 0, device: str = "cuda") -> torch.Tensor:
    """Speech-like noise: a few harmonics under an envelope plus noise (non-zero, non-trivial features)."""
    gen = torch.Generator(device="cpu").manual_seed(seed)
    n = int(seconds * SAMPLE_RATE)
    t = torch.arange(n, dtype=torch.float32) / SAMPLE_RATE
    f0 = 100 + 150 * torch.rand(batch, 1, generator=gen)
    env = 0.5 + 0.5 * torch.sin(2 * torch.pi * 3.0 * t + 6.28 * torch.rand(batch, 1, generator=gen))
    sig = sum(torch.sin(2 * torch.pi * f0 * k * t) / k for k in range(1, 6))
    audio = 0.1 * env * sig + 0.01 * torch.randn(batch, n, generator=gen)
    return audio.to(device)


def cuda_time(fn: Callable[[], Any], warmup: int = 2, iters: int = 5) -> dict[str, float]:
    """Median/min wall time of ``fn`` in seconds, synchronising around each call (CUDA events)."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(iters):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1000.0)
    return {"median_s": statistics.median(times), "min_s": min(times), "iters": iters}


def host_time(fn: Callable[[], Any], warmup: int = 1, iters: int = 3) -> dict[str, float]:
    """Like :func:`cuda_time` but with a host clock (for code that synchronises itself)."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(iters):
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    return {"median_s": statistics.median(times), "min_s": min(times), "iters": iters}


def host_cpu() -> str:
    """The host CPU model and the cores this process may use."""
    model = platform.processor() or "unknown"
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
            names = [line.split(":", 1)[1].strip() for line in cpuinfo if line.startswith("model name")]
        model = names[0] if names else model
    except OSError:
        pass
    return f"{model}, {len(os.sched_getaffinity(0)) if hasattr(os, 'sched_getaffinity') else os.cpu_count()} cores"


def environment() -> dict[str, Any]:
    env: dict[str, Any] = {
        "command": " ".join([os.path.basename(sys.executable), *sys.argv]),
        "commit": os.environ.get("CADENCE_COMMIT", "unknown"),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    env["cpu"] = host_cpu()  # device loans differ in host CPU, which moves host-bound figures (run 12 vs 14)
    if torch.cuda.is_available():
        env["gpu"] = torch.cuda.get_device_name()
        env["cuda"] = torch.version.cuda
    try:
        import transformers

        env["transformers"] = transformers.__version__
    except ImportError:
        pass
    try:
        from cuda.bindings import __version__ as cb

        env["cuda_bindings"] = cb
    except ImportError:
        pass
    return env


def write_result(name: str, data: dict[str, Any], out_dir: str | Path | None = None) -> Path:
    """Write ``{environment, **data}`` as JSON to ``out_dir/name.json`` (default bench/results)."""
    out = Path(out_dir or os.environ.get("CADENCE_RESULTS") or RESULTS_DIR)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{name}.json"
    path.write_text(json.dumps({"environment": environment(), **data}, indent=2, default=str) + "\n")
    return path
