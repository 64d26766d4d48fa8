"""Cadence's processes run numpy's OpenBLAS on one thread (``agent/__init__.py``), unless told otherwise."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROBE = """
import ctypes, agent, numpy
path = next(line.split()[-1] for line in open("/proc/self/maps") if "openblas" in line)
lib = ctypes.CDLL(path)
get = next(getattr(lib, n) for n in ("scipy_openblas_get_num_threads64_", "openblas_get_num_threads64_",
                                      "openblas_get_num_threads") if hasattr(lib, n))
print(get())
"""


def _blas_threads(**env: str) -> int:
    base = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    out = subprocess.run([sys.executable, "-c", PROBE], cwd=ROOT, env={**base, **env}, capture_output=True,
                         text=True, check=True)
    return int(out.stdout.strip())


def test_importing_agent_before_numpy_gives_one_blas_thread() -> None:
    assert _blas_threads() == 1


def test_an_explicit_setting_wins() -> None:
    assert _blas_threads(OPENBLAS_NUM_THREADS="2") == 2
