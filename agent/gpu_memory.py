"""The GPU memory split: each model on the card gets a planned share, checked before start.

``plan_memory`` turns ``[gpu]`` shares into bytes; ``preflight`` refuses, with one line per
problem, a plan whose shares sum past the card, a model that cannot fit in its share, or a
plan that needs more than is free right now. In-process torch models (ASR, TTS) are held to
their shares with ``torch.cuda.set_per_process_memory_fraction``; a vLLM server gets
``--gpu-memory-utilization`` from the plan. Only the standard library is imported at module
level (torch and NVML lazily), so GPU benches can use this file without pipecat.
"""

from __future__ import annotations

import os
import shlex
import time
from dataclasses import dataclass, field
from pathlib import Path

from agent.config import Config, GPUConfig

GIB = 1024**3
COMPONENTS = ("asr", "llm", "tts")
IN_PROCESS = ("asr", "tts")  # models that live in the Cadence process itself
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".nemo", ".onnx", ".engine", ".plan", ".gguf")
WEIGHTS_OVERHEAD = 1.2  # activations, workspaces and graph pools on top of the weights


class GPUPlanError(RuntimeError):
    """The GPU memory plan cannot work on this card; the message says why and what to change."""


@dataclass(frozen=True)
class DeviceMemory:
    index: int
    name: str
    total_bytes: int
    free_bytes: int
    source: str  # "nvml" | "torch" | "given"


@dataclass(frozen=True)
class Share:
    component: str
    fraction: float
    bytes: int
    required_bytes: int | None = None  # None: unknown, not checked


@dataclass(frozen=True)
class MemoryPlan:
    device: int
    total_bytes: int
    headroom_fraction: float
    shares: tuple[Share, ...] = field(default_factory=tuple)

    def share(self, component: str) -> Share:
        return next(s for s in self.shares if s.component == component)

    @property
    def planned_fraction(self) -> float:
        return sum(s.fraction for s in self.shares)

    @property
    def planned_bytes(self) -> int:
        return sum(s.bytes for s in self.shares)

    @property
    def in_process_fraction(self) -> float:
        """What ``set_per_process_memory_fraction`` gets: every in-process model's share."""
        return sum(s.fraction for s in self.shares if s.component in IN_PROCESS)

    def summary(self) -> str:
        parts = [f"{s.component} {s.fraction:.2f} ({_gib(s.bytes)})" for s in self.shares if s.fraction > 0]
        return (f"GPU {self.device} plan of {_gib(self.total_bytes)}: " + ", ".join(parts or ["nothing"])
                + f", headroom {self.headroom_fraction:.2f}")


def _gib(n: int | float) -> str:
    return f"{n / GIB:.1f} GiB"


def weights_bytes(path: str | Path) -> int | None:
    """Bytes of model weights in a local file or directory; None if ``path`` is not local."""
    p = Path(path).expanduser() if path else None
    if p is None or not p.exists():
        return None
    if p.is_file():
        return p.stat().st_size
    return sum(f.stat().st_size for f in p.rglob("*") if f.is_file() and f.name.endswith(WEIGHT_SUFFIXES))


def requirements(config: Config) -> dict[str, int | None]:
    """Bytes each component needs: ``[gpu] *_min_gb`` when set, else weights on disk x overhead."""
    gpu = config.gpu
    guesses = {"asr": config.asr.model, "llm": gpu.vllm_model, "tts": config.tts.voice}
    out: dict[str, int | None] = {}
    for comp in COMPONENTS:
        explicit = float(getattr(gpu, f"{comp}_min_gb"))
        if explicit > 0:
            out[comp] = int(explicit * GIB)
            continue
        on_disk = weights_bytes(guesses[comp])
        out[comp] = int(on_disk * WEIGHTS_OVERHEAD) if on_disk else None
    return out


def plan_memory(gpu: GPUConfig, total_bytes: int,
                required: dict[str, int | None] | None = None) -> MemoryPlan:
    """Shares of ``total_bytes`` from the config (no checks: see ``preflight``)."""
    required = required or {}
    shares = tuple(
        Share(comp, float(getattr(gpu, f"{comp}_fraction")),
              int(float(getattr(gpu, f"{comp}_fraction")) * total_bytes), required.get(comp))
        for comp in COMPONENTS
    )
    return MemoryPlan(gpu.device, int(total_bytes), float(gpu.headroom_fraction), shares)


def problems(plan: MemoryPlan, device: DeviceMemory | None) -> list[str]:
    """Every reason the plan cannot work (empty: it can)."""
    out: list[str] = []
    used = [s for s in plan.shares if s.fraction != 0]
    if not used:
        return out
    if device is None:
        return [f"[gpu] gives shares ({', '.join(s.component for s in used)}) but no CUDA device "
                f"{plan.device} is visible; set the *_fraction values to 0 to run on the CPU"]
    for s in plan.shares:
        if not 0.0 <= s.fraction <= 1.0:
            out.append(f"gpu.{s.component}_fraction = {s.fraction} is outside [0, 1]")
    if not 0.0 <= plan.headroom_fraction < 1.0:
        out.append(f"gpu.headroom_fraction = {plan.headroom_fraction} is outside [0, 1)")
    total = plan.planned_fraction + plan.headroom_fraction
    if total > 1.0 + 1e-9:
        terms = " + ".join(f"{s.component} {s.fraction:.2f}" for s in used)
        out.append(f"the GPU shares sum past the card: {terms} + headroom {plan.headroom_fraction:.2f} "
                   f"= {total:.2f} of {device.name} ({_gib(device.total_bytes)}); lower them to sum to <= 1.0")
    for s in used:
        if s.required_bytes is not None and s.required_bytes > s.bytes:
            out.append(f"{s.component} needs {_gib(s.required_bytes)} but its share is {s.fraction:.2f} x "
                       f"{_gib(device.total_bytes)} = {_gib(s.bytes)}; raise gpu.{s.component}_fraction "
                       f"to at least {s.required_bytes / device.total_bytes:.2f}")
    if plan.planned_bytes > device.free_bytes:
        held = device.total_bytes - device.free_bytes
        out.append(f"the plan needs {_gib(plan.planned_bytes)} but only {_gib(device.free_bytes)} of "
                   f"{_gib(device.total_bytes)} is free on GPU {device.index} ({device.name}); other "
                   f"processes hold {_gib(held)}: stop them or lower the shares")
    return out


def preflight(plan: MemoryPlan, device: DeviceMemory | None) -> MemoryPlan:
    """Return the plan if it can work on ``device``; otherwise raise ``GPUPlanError``."""
    found = problems(plan, device)
    if found:
        raise GPUPlanError("GPU memory plan refused:\n  - " + "\n  - ".join(found))
    return plan


def read_device_memory(index: int = 0) -> DeviceMemory | None:
    """Total and free memory of a CUDA device through NVML (no CUDA context) or torch."""
    try:
        import pynvml  # nvidia-ml-py

        visible = os.environ.get("CUDA_VISIBLE_DEVICES", "").strip()
        if not visible or all(p.strip().isdigit() for p in visible.split(",")):
            physical = int(visible.split(",")[index]) if visible else index
            pynvml.nvmlInit()
            try:
                handle = pynvml.nvmlDeviceGetHandleByIndex(physical)
                info = pynvml.nvmlDeviceGetMemoryInfo(handle)
                name = pynvml.nvmlDeviceGetName(handle)
                name = name.decode() if isinstance(name, bytes) else str(name)
                return DeviceMemory(index, name, int(info.total), int(info.free), "nvml")
            finally:
                pynvml.nvmlShutdown()
    except Exception:  # no NVML library, no driver, or an index NVML does not know
        pass
    try:
        import torch
    except ImportError:
        return None
    if not torch.cuda.is_available() or index >= torch.cuda.device_count():
        return None
    free, total = torch.cuda.mem_get_info(index)
    return DeviceMemory(index, torch.cuda.get_device_name(index), int(total), int(free), "torch")


def plan_for(config: Config, device: DeviceMemory | None = None) -> MemoryPlan | None:
    """Read the card, plan and preflight; None when the config puts nothing on a GPU."""
    gpu = config.gpu
    if not any(getattr(gpu, f"{c}_fraction") for c in COMPONENTS):
        return None
    device = device or read_device_memory(gpu.device)
    total = device.total_bytes if device else 0
    return preflight(plan_memory(gpu, total, requirements(config)), device)


def apply_in_process_fraction(plan: MemoryPlan) -> float:
    """Cap this process's torch allocator at the in-process models' share; return it."""
    fraction = plan.in_process_fraction
    if fraction > 0:
        import torch

        torch.cuda.set_per_process_memory_fraction(fraction, plan.device)
    return fraction


def vllm_args(plan: MemoryPlan, model: str, port: int, extra: str = "") -> list[str]:
    """The vLLM server command for the LLM's planned share of the card."""
    from agent.llm_server import vllm_command

    share = plan.share("llm")
    if share.fraction <= 0:
        raise GPUPlanError("gpu.vllm_model is set but gpu.llm_fraction is 0: give the LLM a share")
    return vllm_command(model, port, share.fraction, shlex.split(extra))


def managed_vllm_server(plan: MemoryPlan, config: Config, log_path: Path | None = None):
    """A ``ManagedLLMServer`` running vLLM on its share (start it with ``start``/``astart``)."""
    from agent.llm_server import ManagedLLMServer, free_port

    port = free_port()
    command = vllm_args(plan, config.gpu.vllm_model, port, config.gpu.vllm_extra_args)
    return ManagedLLMServer(command, port, max(config.llm.server_start_timeout_s, 600.0), log_path)


@dataclass(frozen=True)
class ServerHealth:
    base_url: str
    model: str
    models_ms: float
    first_token_ms: float
    text: str


def check_llm_server(base_url: str, model: str = "", timeout_s: float = 30.0) -> ServerHealth:
    """Ask an OpenAI-compatible server for its models and one streamed token; time both."""
    import json

    import httpx

    from agent.llm_server import LLMServerError

    t0 = time.perf_counter()
    try:
        r = httpx.get(f"{base_url}/models", timeout=timeout_s)
        r.raise_for_status()
        ids = [str(m["id"]) for m in r.json().get("data") or []]
    except (httpx.HTTPError, ValueError, KeyError) as exc:
        raise LLMServerError(f"LLM server at {base_url} is not healthy: GET /models failed ({exc})") from None
    models_ms = (time.perf_counter() - t0) * 1000.0
    model = model or (ids[0] if ids else "default")
    body = {"model": model, "stream": True, "max_tokens": 1, "temperature": 0.0,
            "messages": [{"role": "user", "content": "Say OK."}]}
    t1 = time.perf_counter()
    text, first = "", None
    try:
        with httpx.stream("POST", f"{base_url}/chat/completions", json=body, timeout=timeout_s) as resp:
            resp.raise_for_status()
            for line in resp.iter_lines():
                if not line.startswith("data:") or line.strip() == "data: [DONE]":
                    continue
                delta = json.loads(line[5:])["choices"][0].get("delta", {})
                if delta.get("content"):
                    first = first or time.perf_counter()
                    text += delta["content"]
    except (httpx.HTTPError, ValueError, KeyError, IndexError) as exc:
        raise LLMServerError(f"LLM server at {base_url} is not healthy: a 1-token completion failed "
                             f"({exc})") from None
    if first is None:
        raise LLMServerError(f"LLM server at {base_url} is not healthy: the completion streamed no token")
    return ServerHealth(base_url, model, models_ms, (first - t1) * 1000.0, text)
