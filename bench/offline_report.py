"""Result files for the offline-transcription benchmarks: command, machine, commit, figures."""

from __future__ import annotations

import os
import platform
import subprocess
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def commit() -> str:
    try:
        sha = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                             timeout=10).stdout.strip()
        mine = ["asr/offline", "agent/cli_transcribe_server.py", "bench/offline_*.py", "bench/decode_*.py",
                "bench/transcribe_server.py"]
        dirty = subprocess.run(["git", "status", "--porcelain", "--", *mine], cwd=ROOT,
                               capture_output=True, text=True, timeout=10).stdout.strip()
        return (sha + ("+dirty" if dirty else "")) or "unknown"
    except (OSError, subprocess.SubprocessError):
        return os.environ.get("CADENCE_COMMIT", "unknown")


def machine() -> dict[str, Any]:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    info: dict[str, Any] = {"cpu": cpu, "cores": os.cpu_count(), "load_avg_1m": os.getloadavg()[0]}
    try:
        import torch

        if torch.cuda.is_available():
            info["gpu"] = torch.cuda.get_device_name()
    except ImportError:
        pass
    return info


def save(name: str, data: dict[str, Any], out_dir: str | Path | None = None) -> Path:
    """``bench/results/<name>.json`` (or ``out_dir``) with the command, machine and commit."""
    os.environ.setdefault("CADENCE_COMMIT", commit())
    from bench.common import write_result

    return write_result(name, {"machine": machine(), **data}, out_dir)
