"""smart-turn v3 batched on a device (agent.smart_turn) against pipecat's ONNX model on one CPU core.

Per batch size: the wall ms of one ``TurnBatcher.score`` call (features + model, host copies included; median
of ``--reps``) and ms per request; beside it the ONNX model's wall and CPU ms per inference on this machine
(one thread, as ``vad.turn_model = "onnx"`` runs it), and, on CUDA, the probabilities of bfloat16 against
float32 on the same audio. Writes JSON under bench/results/ with the commit.

    python bench/smart_turn_engine.py                        # CPU: torch on one thread vs ONNX
    python bench/smart_turn_engine.py --device cuda --weights .cascade/smart_turn_v3.npz --out $OUT/turn.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # as agent/__init__.py sets it, before numpy loads its BLAS
import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True).stdout.strip()


def audio_batch(n: int, seed: int = 0) -> np.ndarray:
    """``n`` 8 s windows of speech-like noise (amplitude-modulated), distinct per row."""
    rng = np.random.default_rng(seed)
    t = np.arange(128000) / 16000
    rows = [rng.normal(0, 0.05, 128000) * (0.5 + 0.5 * np.sin(2 * np.pi * rng.uniform(2, 6) * t)) for _ in range(n)]
    return np.stack(rows).astype(np.float32)


def time_calls(fn, reps: int, sync) -> float:
    fn()
    sync()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        sync()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def onnx_cpu(reps: int) -> dict[str, float]:
    from agent.shared_models import SharedSmartTurnAnalyzerV3

    analyzer = SharedSmartTurnAnalyzerV3()
    x = audio_batch(1)[0]
    analyzer._predict_endpoint(x)
    t0, c0 = time.perf_counter(), time.process_time()
    for _ in range(reps):
        analyzer._predict_endpoint(x)
    return {"wall_ms": round((time.perf_counter() - t0) / reps * 1e3, 2),
            "cpu_ms": round((time.process_time() - c0) / reps * 1e3, 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--batches", default="1,2,4,8,16,32,64")
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--weights", default="", help="a .npz of the weights (the H200 image has no onnx/pipecat)")
    parser.add_argument("--out", default=str(ROOT / "bench/results/smart_turn_engine_cpu.json"))
    args = parser.parse_args()
    import torch

    from agent.smart_turn.batcher import TurnBatcher

    if args.device == "cpu":
        torch.set_num_threads(1)
    sync = torch.cuda.synchronize if args.device.startswith("cuda") else (lambda: None)
    batches = [int(b) for b in args.batches.split(",")]
    rows = []
    dtypes = ["float32", "bfloat16"] if args.device.startswith("cuda") else ["float32"]
    probs: dict[str, np.ndarray] = {}
    for dtype in dtypes:
        batcher = TurnBatcher(device=args.device, max_batch=max(batches), dtype=dtype, weights=args.weights)
        probs[dtype] = batcher.score(audio_batch(64, seed=1))
        for b in batches:
            x = audio_batch(b)
            ms = time_calls(lambda x=x, batcher=batcher: batcher.score(x), args.reps, sync)
            rows.append({"dtype": dtype, "batch": b, "call_ms": round(ms, 3), "ms_per_request": round(ms / b, 3)})
            print(f"{args.device} {dtype:8s} batch {b:3d}: {ms:8.2f} ms per call, {ms / b:7.3f} ms per request",
                  flush=True)
    try:
        reference = onnx_cpu(max(5, args.reps // 2))
        print(f"onnx int8, one CPU thread: {reference['wall_ms']} ms wall, {reference['cpu_ms']} ms CPU per inference")
    except ImportError as exc:  # no pipecat here (the H200 image)
        reference = {"skipped": str(exc)}
    out = {
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "commit": git("rev-parse", "--short", "HEAD"),
        "dirty": bool(git("status", "--porcelain", "--untracked-files=no")),
        "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "conditions": {"device": args.device, "cores": len(os.sched_getaffinity(0)), "machine": platform.machine(),
                       "torch": torch.__version__, "loadavg": os.getloadavg(), "reps": args.reps,
                       "gpu": torch.cuda.get_device_name() if args.device.startswith("cuda") else None,
                       "timing": "median wall ms of one TurnBatcher.score call: host copy, features, model, result"},
        "rows": rows,
        "onnx_cpu_per_inference": reference,
    }
    if "bfloat16" in probs:
        diff = np.abs(probs["bfloat16"] - probs["float32"])
        out["bfloat16_vs_float32"] = {"max_abs": float(diff.max()), "mean_abs": float(diff.mean()),
                                      "same_decision": int(((probs["bfloat16"] > 0.5) == (probs["float32"] > 0.5)).sum()),
                                      "of": int(diff.size)}
        print("bfloat16 vs float32:", out["bfloat16_vs_float32"])
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=2))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
