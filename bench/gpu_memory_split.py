"""GPU memory split, checked on a real card: each process held to its planned share.

Plain torch (no pipecat). In this process: plan the card from shares and preflight it, cap
this process with ``torch.cuda.set_per_process_memory_fraction`` (the in-process ASR share),
load the ASR model (random-weight Parakeet-TDT 0.6B via transformers, if present) and run a
batch through its encoder, then fill up to the cap to show where it stops. A second torch
process on the same card takes its own share the same way and holds it; with both holding,
the preflight is run again on what is really free: an over-subscribed plan and a plan larger
than the free memory are refused with their messages, a plan that fits is accepted.

    PYTHONPATH=. timeout 120 python3 bench/gpu_memory_split.py --out $OUT/gpu_memory_split.json
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from agent.config import GPUConfig  # noqa: E402
from agent.gpu_memory import GIB, plan_memory, preflight, problems, read_device_memory  # noqa: E402

BLOCK = 256 * 2**20


def fill_to_cap(device: int, limit_s: float = 30.0) -> tuple[list[torch.Tensor], bool]:
    """Allocate BLOCK-sized tensors until the allocator refuses; True if it did refuse."""
    held: list[torch.Tensor] = []
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        try:
            held.append(torch.empty(BLOCK, dtype=torch.uint8, device=device))
        except torch.OutOfMemoryError:
            return held, True
    return held, False


def share_report(device: int, fraction: float, total: int, refused: bool) -> dict[str, Any]:
    reserved = torch.cuda.memory_reserved(device)
    cap = fraction * total
    return {
        "fraction": fraction,
        "cap_gib": cap / GIB,
        "reserved_gib": reserved / GIB,
        "allocated_gib": torch.cuda.memory_allocated(device) / GIB,
        "refused_past_cap": refused,
        "within_share": reserved <= cap + 1,
        "reached_share": reserved >= cap - 2 * BLOCK,
    }


def child(args: argparse.Namespace) -> int:
    """The second process: take a share, report, hold it until the parent says go."""
    torch.cuda.set_per_process_memory_fraction(args.fraction, args.device)
    total = torch.cuda.get_device_properties(args.device).total_memory
    held, refused = fill_to_cap(args.device)
    print(json.dumps(share_report(args.device, args.fraction, total, refused)), flush=True)
    sys.stdin.readline()  # hold until released
    del held
    return 0


def asr_model_load(device: int) -> dict[str, Any]:
    """The ASR model inside the share: random-weight Parakeet-TDT 0.6B, one encoder batch."""
    try:
        from bench.common import make_model
    except ImportError as exc:  # transformers missing
        return {"skipped": f"no ASR model: {exc}"}
    t0 = time.perf_counter()
    model = make_model(device=f"cuda:{device}", dtype=torch.bfloat16)
    load_s = time.perf_counter() - t0
    torch.cuda.reset_peak_memory_stats(device)
    feats = torch.randn(8, 1000, model.config.encoder_config.num_mel_bins, device=device, dtype=torch.bfloat16)
    with torch.no_grad():
        out = model.encoder(input_features=feats)
    torch.cuda.synchronize(device)
    return {"load_s": load_s, "params_m": sum(p.numel() for p in model.parameters()) / 1e6,
            "encoder_out": list(out.last_hidden_state.shape),
            "peak_allocated_gib": torch.cuda.max_memory_allocated(device) / GIB, "_model": model}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", help="write the JSON result here")
    ap.add_argument("--device", type=int, default=0)
    ap.add_argument("--asr-share", type=float, default=0.25, help="this process's (ASR) share")
    ap.add_argument("--second-share", type=float, default=0.30, help="the second process's share")
    ap.add_argument("--headroom", type=float, default=0.05)
    ap.add_argument("--no-model", action="store_true", help="skip loading the ASR model")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--fraction", type=float, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        return child(args)
    if not torch.cuda.is_available():
        print("gpu_memory_split: no CUDA device visible; nothing to check", file=sys.stderr)
        return 2

    t_start = time.perf_counter()
    result: dict[str, Any] = {"torch": torch.__version__, "argv": sys.argv[1:]}
    dev = read_device_memory(args.device)
    assert dev is not None
    result["device"] = {"name": dev.name, "total_gib": dev.total_bytes / GIB, "free_gib": dev.free_bytes / GIB,
                        "source": dev.source}
    cfg = GPUConfig(device=args.device, asr_fraction=args.asr_share, llm_fraction=args.second_share,
                    headroom_fraction=args.headroom)
    plan = preflight(plan_memory(cfg, dev.total_bytes), dev)
    result["plan"] = plan.summary()

    # 1. This process, capped at the ASR share, with the ASR model in it.
    torch.cuda.set_per_process_memory_fraction(plan.in_process_fraction, args.device)
    model_info = {"skipped": "--no-model"} if args.no_model else asr_model_load(args.device)
    model = model_info.pop("_model", None)
    result["asr_model"] = model_info
    held, refused = fill_to_cap(args.device)
    result["this_process"] = share_report(args.device, plan.in_process_fraction, dev.total_bytes, refused)

    # 2. A second torch process on the same card with its own share, holding it.
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.Popen([sys.executable, __file__, "--child", "--device", str(args.device), "--fraction",
                             str(plan.share("llm").fraction)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            text=True, env=env)
    assert proc.stdout is not None and proc.stdin is not None
    line = proc.stdout.readline()
    result["second_process"] = json.loads(line) if line.strip() else {"error": f"exit {proc.poll()}"}

    # 3. With both holding their shares: preflight against what is really free now.
    now = read_device_memory(args.device)
    assert now is not None
    result["free_with_both_gib"] = now.free_bytes / GIB
    over = plan_memory(GPUConfig(asr_fraction=0.6, llm_fraction=0.5, headroom_fraction=args.headroom),
                       now.total_bytes)
    too_big = plan_memory(GPUConfig(llm_fraction=round(now.free_bytes / now.total_bytes + 0.05, 2),
                                    headroom_fraction=0.0), now.total_bytes)
    fits = plan_memory(GPUConfig(llm_fraction=round(now.free_bytes / now.total_bytes * 0.8, 2),
                                 headroom_fraction=0.0), now.total_bytes)
    result["preflight"] = {"oversubscribed": problems(over, now), "larger_than_free": problems(too_big, now),
                           "fits_in_free": problems(fits, now)}
    proc.stdin.write("\n")
    proc.stdin.flush()
    proc.wait(timeout=30)
    del held, model
    result["seconds"] = time.perf_counter() - t_start

    me, other, pf = result["this_process"], result["second_process"], result["preflight"]
    print(f"{dev.name}: {dev.total_bytes / GIB:.1f} GiB; {plan.summary()}")
    print(f"ASR model: {model_info}")
    for name, r in (("this process (ASR)", me), ("second process", other)):
        if "cap_gib" in r:
            print(f"{name:20s} share {r['fraction']:.2f} = {r['cap_gib']:.1f} GiB: reserved {r['reserved_gib']:.1f} GiB, "
                  f"refused past it: {r['refused_past_cap']}, within share: {r['within_share']}")
        else:
            print(f"{name:20s} {r}")
    print(f"free with both holding: {result['free_with_both_gib']:.1f} GiB")
    print(f"preflight, over-subscribed: {'REFUSED' if pf['oversubscribed'] else 'accepted'} {pf['oversubscribed']}")
    print(f"preflight, larger than free: {'REFUSED' if pf['larger_than_free'] else 'accepted'} {pf['larger_than_free']}")
    print(f"preflight, fits in free: {'accepted' if not pf['fits_in_free'] else 'REFUSED'}")
    ok = (me.get("within_share") and me.get("refused_past_cap") and other.get("within_share")
          and other.get("refused_past_cap") and pf["oversubscribed"] and pf["larger_than_free"]
          and not pf["fits_in_free"])
    result["ok"] = bool(ok)
    print(f"split holds: {ok} ({result['seconds']:.0f} s)")
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(result, indent=2))
        print(f"wrote {args.out}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
