"""Thin, lazy access to cuda-bindings 13.x (driver, runtime, NVRTC) for conditional graph nodes.

Nothing here imports cuda-bindings at module import time: CPU-only installs never need it.
"""

from __future__ import annotations

import functools
import re
from types import ModuleType
from typing import Any

GPU_EXTRA_HINT = "pip install 'cadence[gpu]'"

# CUDA graph WHILE nodes need a 12.4+ driver; 12.6 is what NeMo and our H200 runs validated.
MIN_DRIVER_VERSION = 12060
MIN_BINDINGS_VERSION = (12, 6)


class CudaCallError(RuntimeError):
    """A cuda-bindings call returned an error status."""


@functools.cache
def modules() -> tuple[ModuleType, ModuleType, ModuleType]:
    """Return ``(driver, runtime, nvrtc)`` from cuda-bindings, or raise an ImportError naming the extra."""
    try:
        from cuda.bindings import driver, nvrtc, runtime
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError(
            f"cuda-bindings (driver/runtime/nvrtc) is needed for the CUDA graph decoder: {GPU_EXTRA_HINT}"
        ) from exc
    return driver, runtime, nvrtc


def bindings_version() -> tuple[int, ...]:
    """The installed cuda-bindings version as a tuple of ints (ImportError when absent)."""
    modules()
    from cuda.bindings import __version__

    return parse_version(__version__)


def parse_version(text: str) -> tuple[int, ...]:
    """``"13.3.1"`` -> ``(13, 3, 1)``; ``"13.0.0rc1"`` -> ``(13, 0, 0)``."""
    match = re.match(r"\d+(?:\.\d+)*", text.strip())
    return tuple(int(part) for part in match.group(0).split(".")) if match else ()


def check(result: Any) -> Any:
    """Unpack ``(status, *values)`` from a cuda-bindings call; raise on a non-zero status.

    Returns ``None`` for no values, the value for one, a tuple for several.
    """
    if isinstance(result, tuple):
        status, values = result[0], result[1:]
    else:
        status, values = result, ()
    if int(status) != 0:
        raise CudaCallError(f"CUDA call failed: {status!r}")
    if not values:
        return None
    return values[0] if len(values) == 1 else values


def driver_version() -> int:
    """The CUDA driver API version, e.g. 13000 for a 13.0 driver."""
    driver, _, _ = modules()
    return int(check(driver.cuDriverGetVersion()))


def compile_kernel(source: str, name: str, program: str = "cadence_cond.cu") -> Any:
    """Compile ``source`` with NVRTC and return the ``CUfunction`` named ``name``.

    The CUDA context must be current (touch the device through torch first).
    """
    driver, _, nvrtc = modules()
    prog = check(nvrtc.nvrtcCreateProgram(source.encode(), program.encode(), 0, [], []))
    try:
        status = nvrtc.nvrtcCompileProgram(prog, 0, [])
        if int(status[0]) != 0:
            size = check(nvrtc.nvrtcGetProgramLogSize(prog))
            log = bytearray(size)  # never b" " * size: NVRTC writes into it (see PARAKEET.md)
            check(nvrtc.nvrtcGetProgramLog(prog, log))
            raise CudaCallError(f"NVRTC failed for {name}: {bytes(log).decode(errors='replace')}")
        ptx_size = check(nvrtc.nvrtcGetPTXSize(prog))
        ptx = bytearray(ptx_size)
        check(nvrtc.nvrtcGetPTX(prog, ptx))
    finally:
        nvrtc.nvrtcDestroyProgram(prog)
    import numpy as np

    image = np.frombuffer(bytes(ptx), dtype=np.uint8).copy()
    module = check(driver.cuModuleLoadData(image.ctypes.data))
    return check(driver.cuModuleGetFunction(module, name.encode()))
