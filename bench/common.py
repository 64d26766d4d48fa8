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

from asr.parakeet.random_v3 import (  # noqa: F401  (re-exported for the benches)
    BLANK,
    DURATIONS,
    SAMPLE_RATE,
    V3_ENCODER,
    calibrate_emission,
    make_model,
    random_audio,
    tdt_config,
)

RESULTS_DIR = Path(__file__).resolve().parent / "results"
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
    """Like :func:`cuda_time` but with a host clock (for code that synchronises itself; on a machine without
    CUDA, plain wall time)."""
    cuda = torch.cuda.is_available()
    for _ in range(warmup):
        fn()
    if cuda:
        torch.cuda.synchronize()
    times = []
    for _ in range(iters):
        t0 = time.perf_counter()
        fn()
        if cuda:
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
