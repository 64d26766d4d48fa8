"""Where Kokoro's GPU time goes: one batch profiled by part and by kernel class, and its convolutions timed alone.

    python bench/kokoro_profile.py --batch 32 --out /tmp/kokoro_profile.json

Three readings, each of the same random-weight Kokoro-82M (bf16 decoder, letters as phonemes):

1. **Parts.** One eager ``synthesize`` call of ``--batch`` clauses under ``torch.profiler``, every part of the
   model (text side, prosody, the decoder's AdaIN blocks, each generator stage) wrapped in a named range: the
   kernel time inside each range, and the kernel time by class (convolution, GEMM, FFT, LSTM, reduction,
   elementwise, copy).
2. **Convolutions alone.** Each of the generator's convolution shapes (channels, kernel, dilation at its stage's
   length for ``--clause-s`` seconds of audio) at the batch, timed with CUDA events as cuDNN's default pick, with
   ``cudnn.benchmark``, and as a channels-last 2-d convolution; with the FLOP rate each reaches.
3. **The call.** The same batch's wall time eagerly with cuDNN's default pick and with ``cudnn.benchmark``.

No CUDA graph is captured: the kernels are what a graph replays, and the parts are only named eagerly.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import re
import sys
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from bench.common import cuda_time, environment, host_time  # noqa: E402

CLAUSES = [
    "Sure, I can help with that.",
    "Your order shipped this morning and should arrive on Thursday.",
    "Let me check the account for you.",
    "The next available appointment is at three thirty tomorrow afternoon.",
    "Thanks for waiting.",
    "I have moved the delivery to the address you gave me, and you will get a text when it is on its way.",
    "Is there anything else I can do for you today?",
    "That fee was refunded, so your balance is now zero.",
]

KERNEL_CLASSES = [  # first match wins
    ("fft", r"fft|FFT"),
    ("lstm", r"LSTM|lstm|rnn|RNN|elemWise|persist"),
    ("conv", r"conv|Conv|implicit|winograd|cudnn|xmma_fprop|fprop|dgrad|wgrad|nchw|nhwc"),
    ("gemm", r"gemm|Gemm|GEMM|cublas|cutlass|sm90_xmma|ampere_|matmul|gemv"),
    ("reduce", r"reduce|Reduce|norm|Norm|softmax|cumsum|scan"),
    ("copy", r"copy|Copy|cat|Cat|gather|index|Memcpy|Memset|fill|pad|flip"),
    ("elementwise", r"elementwise|Elementwise|vectorized|unrolled|triton"),
]


def kernel_class(name: str) -> str:
    for label, pattern in KERNEL_CLASSES:
        if re.search(pattern, name):
            return label
    return "other"


@contextlib.contextmanager
def named_parts(model: Any) -> Iterator[list[str]]:
    """Wrap the model's parts in ``record_function`` ranges (restored on exit); yields the range names."""
    from torch.profiler import record_function

    dec, gen = model.decoder, model.decoder.generator
    targets: list[tuple[str, Any, str]] = [
        ("text.bert", model, "bert"), ("text.bert_encoder", model, "bert_encoder"),
        ("text.prosody_encoder", model.predictor, "text_encoder"), ("text.durations", model.predictor, "durations"),
        ("text.text_encoder", model, "text_encoder"), ("acoustic.f0_energy", model.predictor, "f0_energy"),
        ("decoder.encode", dec, "encode"), ("gen.source", gen, "m_source"), ("gen.conv_post", gen, "conv_post"),
    ]
    targets += [("decoder.decode", dec.decode, str(i)) for i in range(len(dec.decode))]
    for i in range(gen.num_upsamples):
        targets.append((f"gen.stage{i}.up", gen.ups, str(i)))
        targets.append((f"gen.stage{i}.noise", gen.noise_res, str(i)))
        for j in range(gen.num_kernels):
            targets.append((f"gen.stage{i}.resblocks", gen.resblocks, str(i * gen.num_kernels + j)))
    restore: list[Callable[[], None]] = []

    def wrap(label: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def call(*args: Any, **kw: Any) -> Any:
            with record_function(label):
                return fn(*args, **kw)
        return call

    for label, owner, attr in targets:
        obj = owner[int(attr)] if attr.isdigit() else getattr(owner, attr)
        if isinstance(obj, torch.nn.Module):
            method = "parts" if hasattr(obj, "parts") else "forward"  # the generator calls a resblock's parts()
            obj.__dict__[method] = wrap(label, getattr(obj, method))
            restore.append(lambda o=obj, m=method: o.__dict__.pop(m, None))
        else:  # a bound method (predictor.f0_energy, .durations)
            setattr(owner, attr, wrap(label, obj))
            restore.append(lambda o=owner, a=attr: o.__dict__.pop(a, None))
    try:
        yield sorted({t[0] for t in targets})
    finally:
        for undo in restore:
            undo()


def profile_parts(engine: Any, items: list[Any]) -> dict[str, Any]:
    from torch.profiler import ProfilerActivity, profile

    model = engine.model
    with named_parts(model) as names:
        model.synthesize(items, frame_bucket=engine.options.frame_bucket)
        sync()
        cuda = torch.cuda.is_available()
        with profile(activities=[ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])) as prof:
            model.synthesize(items, frame_bucket=engine.options.frame_bucket)
            sync()
    parts: dict[str, float] = {}
    by_class: dict[str, float] = defaultdict(float)
    top: dict[str, float] = defaultdict(float)
    for ev in prof.key_averages():
        total = getattr(ev, "device_time_total", None) or getattr(ev, "cuda_time_total", 0.0)
        self_dev = getattr(ev, "self_device_time_total", None) or getattr(ev, "self_cuda_time_total", 0.0)
        if ev.key in names:
            parts[ev.key] = round(total / 1000, 3)
        if not cuda:  # the smoke run: CPU time of the ranges only
            total = ev.cpu_time_total
            if ev.key in names:
                parts[ev.key] = round(total / 1000, 3)
            continue
        if ev.key in names:  # a range's span on the GPU (gaps included), not a kernel
            continue
        if self_dev and str(getattr(ev, "device_type", "")).endswith("CUDA"):
            by_class[kernel_class(ev.key)] += self_dev / 1000
            top[ev.key] += self_dev / 1000
    kernels_ms = sum(by_class.values())
    if cuda:  # kernel time launched inside each range: its CPU-side event's device total (no gaps)
        parts = defaultdict(float)
        for ev in prof.events():
            if ev.name in names and str(getattr(ev, "device_type", "")).endswith("CPU"):
                parts[ev.name] += (getattr(ev, "device_time_total", None) or getattr(ev, "cuda_time_total", 0.0)) / 1000
        parts = {k: round(v, 3) for k, v in parts.items()}
    return {"kernels_ms": round(kernels_ms, 2), "parts_ms": parts,
            "classes_ms": {k: round(v, 2) for k, v in sorted(by_class.items(), key=lambda kv: -kv[1])},
            "top_kernels_ms": {k[:120]: round(v, 2) for k, v in sorted(top.items(), key=lambda kv: -kv[1])[:25]}}


def sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def median_ms(fn: Callable[[], Any], iters: int, device_clock: bool = True) -> float:
    """Median milliseconds of ``fn`` after two warm calls: ``bench.common``'s CUDA-event clock (``device_clock``) or
    its synchronised host clock; on the CPU (``--smoke``) the host clock alone."""
    timer = cuda_time if device_clock and torch.cuda.is_available() else host_time
    return timer(fn, warmup=2, iters=iters)["median_s"] * 1000


def conv_shapes(model: Any, clause_s: float) -> list[dict[str, int]]:
    """The generator's distinct (channels, kernel, dilation, length) convolutions for ``clause_s`` s of audio."""
    gen = model.decoder.generator
    rate = model.sample_rate / gen.samples_per_frame  # generator input frames per second
    shapes: dict[tuple[int, int, int, int], int] = {}
    for i in range(gen.num_upsamples):
        length = int(clause_s * rate * gen.upsample_rates[0] * (gen.upsample_rates[1] if i else 1)) + (1 if i else 0)
        blocks = list(gen.resblocks[i * gen.num_kernels:(i + 1) * gen.num_kernels]) + [gen.noise_res[i]]
        for block in blocks:
            for conv in list(block.convs1) + list(block.convs2):
                key = (conv.in_channels, conv.kernel_size[0], conv.dilation[0], length)
                shapes[key] = shapes.get(key, 0) + 1
    return [{"channels": c, "kernel": k, "dilation": d, "length": n, "count": cnt}
            for (c, k, d, n), cnt in sorted(shapes.items())]


def time_conv(s: dict[str, int], batch: int, dtype: torch.dtype, dev: torch.device, iters: int) -> dict[str, Any]:
    """One generator convolution shape at ``batch``: cuDNN's pick, with ``cudnn.benchmark``, channels-last 2-d,
    and im2col + one GEMM; milliseconds each and the FLOP rates."""
    c, k, d, n = s["channels"], s["kernel"], s["dilation"], s["length"]
    pad = (k * d - d) // 2
    x = torch.randn(batch, c, n, device=dev, dtype=dtype)
    w = torch.randn(c, c, k, device=dev, dtype=dtype) * 0.02
    bias = torch.zeros(c, device=dev, dtype=dtype)
    x4 = x[:, :, None, :].contiguous(memory_format=torch.channels_last)
    w4 = w[:, :, None, :].contiguous(memory_format=torch.channels_last)
    xp = F.pad(x, (pad, pad))
    wt = w.permute(0, 2, 1).reshape(c, k * c)

    def conv1d() -> torch.Tensor:
        return F.conv1d(x, w, bias, padding=pad, dilation=d)

    def conv2d() -> torch.Tensor:
        return F.conv2d(x4, w4, bias, padding=(0, pad), dilation=(1, d))

    def im2col() -> torch.Tensor:  # the k shifted copies stacked, then one GEMM
        return torch.matmul(wt, torch.cat([xp[:, :, j * d:j * d + n] for j in range(k)], dim=1))

    out: dict[str, Any] = dict(s)
    for label, fn, bench in (("cudnn_default", conv1d, False), ("cudnn_benchmark", conv1d, True),
                             ("channels_last", conv2d, False), ("channels_last_benchmark", conv2d, True),
                             ("im2col_gemm", im2col, False)):
        torch.backends.cudnn.benchmark = bench
        out[label + "_ms"] = round(median_ms(fn, iters), 3)
    torch.backends.cudnn.benchmark = False
    flops = 2 * batch * c * c * k * n
    best = min(v for key, v in out.items() if key.endswith("_ms"))
    out["tflops_default"] = round(flops / (out["cudnn_default_ms"] / 1000) / 1e12, 1)
    out["tflops_best"] = round(flops / (best / 1000) / 1e12, 1)
    return out


def time_convs(shapes: list[dict[str, int]], batch: int, dtype: torch.dtype, iters: int) -> list[dict[str, Any]]:
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    rows = []
    for s in shapes:
        out = time_conv(s, batch, dtype, dev, iters)
        print(f"  conv C={s['channels']:4d} k={s['kernel']:2d} d={s['dilation']} n={s['length']:6d} x{s['count']}: "
              + ", ".join(f"{key[:-3]} {v:.3f}" for key, v in out.items() if key.endswith("_ms"))
              + f" ms; {out['tflops_default']} -> {out['tflops_best']} TFLOP/s", flush=True)
        rows.append(out)
    return rows


def channels_last_1d(t: torch.Tensor) -> torch.Tensor:
    """(B, C, T) with the channels innermost in memory (strides (T*C, 1, C)): a 1-d channels-last activation."""
    return t.transpose(1, 2).contiguous().transpose(1, 2)


def time_resblock_layouts(model: Any, batch: int, frames: int, iters: int) -> dict[str, Any]:
    """One stage-1 generator resblock (``parts``, the fused steps as the model's kernels are set) over a batch of
    ``frames`` alignment frames: activations channels-first (as the model runs) against channels-last, with its
    convolution weights as they are and channels-last too; milliseconds and the output's strides."""
    from tts.kokoro.layers import Span

    gen = model.decoder.generator
    block = gen.resblocks[gen.num_kernels]  # stage 1 (the last upsample), the smallest kernel
    dtype, dev = model.decoder_dtype, model.device
    t = frames * 2 * gen.upsample_rates[0] * gen.upsample_rates[1] + 1
    c = block.convs1[0].in_channels
    span = Span.of([t] * batch, t, dev, dtype)
    x = torch.randn(batch, c, t, device=dev, dtype=dtype)
    s = torch.randn(batch, block.adain1[0].fc.in_features, device=dev, dtype=dtype)
    convs = [*block.convs1, *block.convs2]
    weights = [conv.weight.data for conv in convs]
    out: dict[str, Any] = {"channels": c, "samples": t}
    try:
        for label, xin, cl_weights in (("channels_first", x, False), ("channels_last_input", channels_last_1d(x), False),
                                       ("channels_last_both", channels_last_1d(x), True)):
            for conv, w in zip(convs, weights, strict=True):
                conv.weight.data = channels_last_1d(w) if cl_weights else w
            with torch.inference_mode():
                z, _zb, _x = block.parts(xin, s, span)
                out[label + "_ms"] = round(median_ms(lambda xin=xin: block.parts(xin, s, span), iters), 3)
            out[label + "_out_strides"] = list(z.stride())
            print(f"  stage-1 resblock {label}: {out[label + '_ms']} ms, output strides {list(z.stride())}", flush=True)
    finally:
        for conv, w in zip(convs, weights, strict=True):
            conv.weight.data = w
    return out


def _call_ms(engine: Any, items: list[Any], iters: int) -> float:
    """One ``synthesize`` call of the batch, host clock (it syncs on the durations itself)."""
    model, bucket = engine.model, engine.options.frame_bucket
    return round(median_ms(lambda: model.synthesize(items, frame_bucket=bucket), iters, device_clock=False), 2)


def time_calls(engine: Any, items: list[Any], iters: int, frames: int, compiled: bool, graphs: bool
               ) -> dict[str, Any]:
    """The batch's wall time per mode: eager (cuDNN's pick, then ``cudnn.benchmark``), the fused steps compiled,
    and each replayed from CUDA graphs captured for this batch's size (decoder and text side), with the seconds
    the compile and the captures took."""
    model = engine.model
    out: dict[str, Any] = {}
    modes = [("eager", False, False)] + ([("compiled", True, False)] if compiled else [])
    modes += [(f"{m}_graphs", c, True) for m, c, _ in list(modes)] if graphs and torch.cuda.is_available() else []
    torch.backends.cudnn.benchmark = False
    for label, comp, replay in modes:
        t0 = time.perf_counter()
        model.set_compiled(comp)
        model.graphs = model.text_graphs = None
        if replay:
            step = -(-frames // 32) * 32
            tokens = -(-max(len(u.ids) + 2 for u in items) // 32) * 32
            model.enable_decoder_graphs(len(items), frame_step=step, max_frames=step, max_cells=len(items) * step)
            model.enable_text_graphs(len(items), token_step=tokens, max_tokens=tokens, max_cells=len(items) * tokens)
        model.synthesize(items, frame_bucket=engine.options.frame_bucket)
        sync()
        out[label + "_setup_s"] = round(time.perf_counter() - t0, 1)
        out[label + "_ms"] = _call_ms(engine, items, iters)
        print(f"  one call of {len(items)} clauses, {label}: {out[label + '_ms']} ms "
              f"(setup {out[label + '_setup_s']} s)", flush=True)
    if not graphs:
        torch.backends.cudnn.benchmark = True
        out["eager_cudnn_benchmark_ms"] = _call_ms(engine, items, iters)
        torch.backends.cudnn.benchmark = False
    model.graphs = model.text_graphs = None
    model.set_compiled(False)
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--dtype", default="bfloat16")
    p.add_argument("--clause-s", type=float, default=0.0,
                   help="audio seconds of a clause for the conv shapes (0: the batch's padded length)")
    p.add_argument("--iters", type=int, default=10)
    p.add_argument("--compile", action="store_true", help="also time and profile the fused steps compiled")
    p.add_argument("--graphs", action="store_true", help="also time each mode replayed from CUDA graphs")
    p.add_argument("--layouts", action="store_true",
                   help="also time one generator resblock with channels-first and channels-last activations")
    p.add_argument("--out", default="")
    p.add_argument("--smoke", action="store_true", help="the tiny configuration on the CPU (checks the script only)")
    args = p.parse_args()
    if not torch.cuda.is_available() and not args.smoke:
        sys.exit("kokoro_profile needs CUDA (--smoke runs the tiny configuration on the CPU)")
    from tts.kokoro.engine import KokoroEngine
    from tts.kokoro.options import KokoroOptions

    engine = KokoroEngine(KokoroOptions(device="cpu" if args.smoke else "cuda", dtype="float32" if args.smoke else args.dtype,
                                        g2p="chars", warmup=False, seed=1, tiny=args.smoke))
    items = [u for i in range(args.batch) for u in engine.utterances(CLAUSES[i % len(CLAUSES)], seed=i)][:args.batch]
    res = engine.model.synthesize(items, frame_bucket=engine.options.frame_bucket)
    audio_s = sum(len(a) for a in res.audio) / engine.sample_rate
    print(f"kokoro_profile: {len(items)} clauses, {audio_s:.1f} s of audio, {res.frames} padded frames "
          f"({res.frames * engine.model.samples_per_frame / engine.sample_rate:.2f} s)", flush=True)
    result: dict[str, Any] = {"environment": environment(), "batch": len(items), "audio_s": round(audio_s, 2),
                              "padded_frames": res.frames, "dtype": args.dtype}
    result["call"] = time_calls(engine, items, args.iters, res.frames, args.compile, args.graphs)
    for label in ("eager", "compiled") if args.compile else ("eager",):
        engine.model.set_compiled(label == "compiled")
        result["profile_" + label] = prof = profile_parts(engine, items)
        print(f"  {label}: kernels {prof['kernels_ms']} ms; by class {prof['classes_ms']}", flush=True)
        for name, ms in sorted(prof["parts_ms"].items()):
            print(f"    {name:24s} {ms:8.2f} ms", flush=True)
        for name, ms in list(prof["top_kernels_ms"].items())[:12]:
            print(f"    {ms:8.2f} ms  {name[:110]}", flush=True)
    if args.layouts:
        for label in ("eager", "compiled") if args.compile else ("eager",):
            engine.model.set_compiled(label == "compiled")
            print(f"  resblock layouts, {label} steps:", flush=True)
            result["layouts_" + label] = time_resblock_layouts(engine.model, len(items), res.frames, args.iters)
    engine.model.set_compiled(False)
    padded_s = res.frames * engine.model.samples_per_frame / engine.sample_rate
    result["convs"] = time_convs(conv_shapes(engine.model, args.clause_s or padded_s), len(items),
                                 engine.model.decoder_dtype, args.iters)
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
