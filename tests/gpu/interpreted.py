"""Run checks under Triton's CPU interpreter (``TRITON_INTERPRET=1``) in subprocesses, side by side.

The interpreter keeps one core busy per process: a check split over two processes took 35 s instead of 58 s
on the 2-core box. Each process prints one JSON line last; a failing one fails the caller with its stderr.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def run_side_by_side(commands: list[list[str]], logs: Path, timeout_s: float = 540.0) -> list[dict]:
    """``python -m COMMAND...`` for each command at once; their last JSON lines, in order."""
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": str(ROOT)}
    runs = []
    for i, command in enumerate(commands):
        out, err = logs / f"run{i}.out", logs / f"run{i}.err"
        with out.open("w") as o, err.open("w") as e:
            runs.append((subprocess.Popen([sys.executable, "-m", *command], cwd=ROOT, env=env, stdout=o, stderr=e),
                         out, err))
    try:
        codes = [proc.wait(timeout=timeout_s) for proc, _, _ in runs]
    finally:
        for proc, _, _ in runs:
            proc.kill()
    results = []
    for code, (_, out, err), command in zip(codes, runs, commands, strict=True):
        assert code == 0, f"{' '.join(command)}:\n{err.read_text()[-3000:]}"
        results.append(json.loads(out.read_text().strip().splitlines()[-1]))
    return results
