"""Native decode (libsndfile + soxr, GIL released) against a frame-by-frame PyAV loop.

The loop (``transports.audio_io.load_audio``) is what most Python servers do: demux, decode,
resample and copy each ~25 ms frame from Python. The native path decodes a whole time range
in one call. Both run on a thread pool, as a server's ``asyncio.to_thread`` would, with 1 and
8 files at once; an asyncio ticker on the main thread measures how late the event loop gets
(the GIL made visible). Files are 44.1 kHz stereo, decoded to 16 kHz mono.

Usage: python bench/decode_gil.py [--seconds 300] [--formats mp3,flac] [--concurrency 1,8]
"""

from __future__ import annotations

import argparse
import asyncio
import resource
import shutil
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from asr.offline.decode import decode_file  # noqa: E402
from bench.offline_report import save  # noqa: E402
from testkit.offline_audio import write_audio  # noqa: E402
from transports.audio_io import load_audio  # noqa: E402

METHODS = {
    "pyav_frame_loop": lambda p: load_audio(p, 16000),
    "native_one_range": lambda p: decode_file(p, 16000, chunk_s=1e9),
    "native_ranges": lambda p: decode_file(p, 16000, chunk_s=60.0),
}


def music(seconds: float, rate: int = 44100) -> np.ndarray:
    t = np.arange(int(seconds * rate)) / rate
    rng = np.random.default_rng(0)
    left = 0.2 * np.sin(2 * np.pi * 220 * t * (1 + 0.01 * np.sin(2 * np.pi * 0.2 * t)))
    right = 0.2 * np.sin(2 * np.pi * 330 * t) + 0.02 * rng.standard_normal(len(t))
    return np.stack([left, right], axis=1).astype(np.float32)


def cpu_seconds() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


async def run_case(fn: Any, files: list[Path], pool: ThreadPoolExecutor) -> dict[str, Any]:
    loop = asyncio.get_running_loop()
    lags: list[float] = []
    done = asyncio.Event()

    async def ticker() -> None:
        while not done.is_set():
            t0 = loop.time()
            await asyncio.sleep(0.001)
            lags.append(loop.time() - t0 - 0.001)

    tick = asyncio.create_task(ticker())
    c0, t0 = cpu_seconds(), time.perf_counter()
    outs = await asyncio.gather(*(loop.run_in_executor(pool, fn, f) for f in files))
    wall = time.perf_counter() - t0
    cpu = cpu_seconds() - c0
    done.set()
    await tick
    audio_s = sum(len(o) for o in outs) / 16000
    lags.sort()
    return {"files": len(files), "wall_s": round(wall, 3), "audio_s_per_wall_s": round(audio_s / wall, 1),
            "cores_busy": round(cpu / wall, 2), "audio_s_per_cpu_s": round(audio_s / max(cpu, 1e-9), 1),
            "loop_lag_p50_ms": round(1000 * statistics.median(lags), 2),
            "loop_lag_p99_ms": round(1000 * lags[int(0.99 * (len(lags) - 1))], 2),
            "loop_lag_max_ms": round(1000 * lags[-1], 2)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=300.0)
    ap.add_argument("--formats", default="mp3,flac")
    ap.add_argument("--concurrency", default="1,8")
    ap.add_argument("--repeats", type=int, default=2, help="best of N per case")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    levels = [int(c) for c in args.concurrency.split(",")]
    results: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp, ThreadPoolExecutor(max(levels)) as pool:
        source = music(args.seconds)
        for fmt in args.formats.split(","):
            first = write_audio(Path(tmp) / f"f0.{fmt}", source, 44100)
            files = [first] + [shutil.copy(first, Path(tmp) / f"f{i}.{fmt}") for i in range(1, max(levels))]
            files = [Path(f) for f in files]
            for n in levels:
                for name, fn in METHODS.items():
                    fn(files[0])  # warm caches and imports
                    best = min((asyncio.run(run_case(fn, files[:n], pool)) for _ in range(args.repeats)),
                               key=lambda r: r["wall_s"])
                    row = {"format": fmt, "method": name, "concurrency": n, **best}
                    results.append(row)
                    print(f"{fmt:5s} {name:17s} x{n}: {row['audio_s_per_wall_s']:7.1f} audio s/s, "
                          f"{row['audio_s_per_cpu_s']:6.1f} audio s/cpu s, {row['cores_busy']:.2f} cores, loop lag p99 {row['loop_lag_p99_ms']:.1f} ms "
                          f"max {row['loop_lag_max_ms']:.1f} ms", flush=True)
    ratios = {}
    for fmt in args.formats.split(","):
        for n in levels:
            by = {r["method"]: r for r in results if r["format"] == fmt and r["concurrency"] == n}
            base = by["pyav_frame_loop"]["audio_s_per_wall_s"]
            for name in ("native_one_range", "native_ranges"):
                ratios[f"{fmt}_x{n}_{name}_vs_loop"] = round(by[name]["audio_s_per_wall_s"] / base, 2)
                ratios[f"{fmt}_x{n}_{name}_vs_loop_loop_lag_p99"] = round(
                    by[name]["loop_lag_p99_ms"] / max(by["pyav_frame_loop"]["loop_lag_p99_ms"], 1e-9), 2)
    for k, v in ratios.items():
        print(f"{k}: {v}x")
    path = save("decode_gil_cpu", {"seconds_per_file": args.seconds, "results": results, "ratios": ratios},
                args.out)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
