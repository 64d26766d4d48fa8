"""CPU per small upload: the disk path (temporary file, ``probe``, ``decode_file``, unlink) against the in-memory
path (``asr.offline.memory_audio``), one process, per format, with the decoded samples checked equal.

    python bench/upload_decode_cpu.py --seconds 7 --repeats 200 --out bench/results/upload_decode_cpu.json
"""

from __future__ import annotations

import argparse
import io
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import soundfile as sf

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from asr.offline.decode import decode_file, probe  # noqa: E402
from asr.offline.memory_audio import decode_memory_audio, memory_audio  # noqa: E402

FORMATS = (("WAV", "PCM_16"), ("WAV", "PCM_24"), ("FLAC", None), ("OGG", None))


def clip_bytes(fmt: str, subtype: str | None, seconds: float, rate: int = 16000) -> bytes:
    rng = np.random.default_rng(1)
    n = int(seconds * rate)
    audio = (np.sin(np.arange(n) * 0.05) * 0.25 + rng.normal(0, 0.015, n)).astype(np.float32)
    buf = io.BytesIO()
    sf.write(buf, audio, rate, format=fmt, subtype=subtype)
    return buf.getvalue()


def by_disk(data: bytes, suffix: str) -> np.ndarray:
    fd, name = tempfile.mkstemp(prefix="cadence-upload-", suffix=suffix)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    try:
        probe(name)
        return decode_file(name, 16000)
    finally:
        os.unlink(name)


def by_memory(data: bytes) -> np.ndarray:
    parsed = memory_audio(data)
    assert parsed is not None
    return decode_memory_audio(data, *parsed, 16000)


def cpu_ms(fn, repeats: int) -> float:
    fn()
    t0 = time.process_time()
    for _ in range(repeats):
        fn()
    return (time.process_time() - t0) / repeats * 1000.0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=7.0)
    ap.add_argument("--repeats", type=int, default=200)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    rows = []
    for fmt, subtype in FORMATS:
        data = clip_bytes(fmt, subtype, args.seconds)
        suffix = "." + fmt.lower()
        same = bool(np.array_equal(by_disk(data, suffix), by_memory(data)))
        disk = cpu_ms(lambda d=data, s=suffix: by_disk(d, s), args.repeats)
        memory = cpu_ms(lambda d=data: by_memory(d), args.repeats)
        row = {"format": fmt, "subtype": subtype, "bytes": len(data), "same_samples": same,
               "disk_cpu_ms": round(disk, 3), "memory_cpu_ms": round(memory, 3)}
        rows.append(row)
        print(f"{fmt:5s} {subtype or '':7s} {len(data):8d} B  disk {disk:6.3f} ms  memory {memory:6.3f} ms  "
              f"same samples {same}", flush=True)
    if args.out:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                                cwd=Path(__file__).resolve().parents[1]).stdout.strip()
        args.out.write_text(json.dumps({"command": "python " + " ".join(sys.argv), "commit": commit,
                                        "seconds": args.seconds, "repeats": args.repeats, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
