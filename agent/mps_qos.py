"""CUDA MPS quality of service per GPU stage: the environment each GPU child process starts with.

Under MPS (``bench/h200_cascade.sh`` MPS=1) the three GPU processes' kernels share the SMs with no order between
them. Runs 66-68 (H100, 64 callers): Kokoro's engine ran 91 ticks of 2.5 clauses in 5 s at 0.91 busy, ~55 ms a
tick, where alone one clause takes 18.5 ms and eight 47 ms (run 70): its small latency-bound kernels wait behind
the LLM's and Parakeet's. Two levers MPS reads from a client's environment when the client starts:

- ``CUDA_MPS_CLIENT_PRIORITY``: ``gpu.mps_<stage>_priority``, 0 (normal) or 1 (below normal): a below-normal
  client's work is scheduled after normal clients' work;
- ``CUDA_MPS_ACTIVE_THREAD_PERCENTAGE``: ``gpu.mps_<stage>_sm_percent``, 1-100 (0: no cap): the share of the SMs
  the client's kernels may occupy. Run 72 (H100, transformers 5.17, torch 2.11): ``gpu.mps_llm_sm_percent = 60``
  broke the transformers server: its first completion sampled from NaN probabilities while the server captured its
  CUDA graph (a device-side assert), and the start was refused. Do not cap the LLM server's SMs with that server.

Stages: ``llm`` (the LLM server and its replicas), ``asr`` and ``tts`` (the engine processes; an engine hosting
both takes ``tts``'s). Without MPS the variables are ignored. All 0 (the default): children inherit the
environment unchanged.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

STAGES = ("asr", "llm", "tts")


class MPSQoSError(ValueError):
    """A ``gpu.mps_*`` setting out of its range."""


def mps_env(gpu: Any, stage: str) -> dict[str, str]:
    """The MPS variables ``gpu`` (``GPUConfig``) sets for ``stage``'s processes (empty: none)."""
    if stage not in STAGES:
        raise MPSQoSError(f"no GPU stage {stage!r} (known: {', '.join(STAGES)})")
    priority = int(getattr(gpu, f"mps_{stage}_priority", 0))
    percent = int(getattr(gpu, f"mps_{stage}_sm_percent", 0))
    if priority not in (0, 1):
        raise MPSQoSError(f"gpu.mps_{stage}_priority = {priority}: 0 (normal) or 1 (below normal)")
    if not 0 <= percent <= 100:
        raise MPSQoSError(f"gpu.mps_{stage}_sm_percent = {percent}: 1-100, or 0 for no cap")
    env = {}
    if priority:
        env["CUDA_MPS_CLIENT_PRIORITY"] = str(priority)
    if percent:
        env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] = str(percent)
    return env


def child_env(gpu: Any, stage: str, base: Mapping[str, str] | None = None) -> dict[str, str] | None:
    """``base`` (default: this process's environment) with ``stage``'s MPS variables; None when it sets none (the
    child inherits)."""
    extra = mps_env(gpu, stage)
    if not extra:
        return None
    return {**(os.environ if base is None else base), **extra}
