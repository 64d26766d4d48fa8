"""The GPU memory split: ASR, LLM and TTS each get a planned share, checked before and after start.

``plan_memory`` turns ``[gpu]`` shares into bytes; ``preflight`` refuses, with one line per
problem naming the stage, a plan whose shares sum past the card, a model that cannot fit in its
share, or a plan that needs more than is free right now.

How each stage is held to its share:

- ASR and TTS live in the Cadence process. torch's caching-allocator cap
  (``set_per_process_memory_fraction``) is process-wide, so the process is capped at asr + tts
  together, and each model's peak measured while it loads and warms up (``StagePeaks``) is checked
  against its own share (``measured_problems``).
- The LLM runs in its own server: vLLM gets ``--gpu-memory-utilization`` = its share; ``transformers
  serve`` has no such flag, so its KV cache is sized from the share (``transformers_cache_fraction``)
  and what the server process really holds after warm-up is read through NVML and checked.

Only the standard library is imported at module level (torch and NVML lazily), so GPU benches can
use this file without pipecat.
"""

from __future__ import annotations

import math
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
    guesses = {"asr": config.asr.model, "llm": llm_model(config), "tts": config.tts.voice}
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


def llm_server_kind(config: Config) -> str:
    """``llm.server``; the older ``gpu.vllm_model`` alone also selects vLLM."""
    from agent.llm_server import check_server_kind

    kind = check_server_kind(config.llm.server)
    return "vllm" if kind == "llama.cpp" and config.gpu.vllm_model else kind


def llm_model(config: Config) -> str:
    """The model a GPU LLM server loads: ``llm.model``, else ``gpu.vllm_model``."""
    if config.llm.server == "llama.cpp" and not config.gpu.vllm_model:
        return config.llm.model
    return config.llm.model or config.gpu.vllm_model


def vllm_args(plan: MemoryPlan, model: str, port: int, extra: str = "", max_model_len: int | None = None,
              served_model_name: str | None = None) -> list[str]:
    """The vLLM server command for the LLM's planned share of the card."""
    from agent.llm_server import vllm_command

    share = plan.share("llm")
    if share.fraction <= 0:
        raise GPUPlanError("the LLM runs on vLLM but gpu.llm_fraction is 0: give the LLM a share")
    return vllm_command(model, port, share.fraction, shlex.split(extra), max_model_len=max_model_len,
                        served_model_name=served_model_name)


# What a transformers-serve process holds beyond its weights and the memory it gives its KV cache and
# activations: CUDA context (~0.5 GiB on an H200), cuBLAS workspaces, allocator slack; planned with margin
# because the NVML check after warm-up refuses a server over its share.
TRANSFORMERS_OVERHEAD_BYTES = 3 * GIB


def transformers_cache_fraction(share_bytes: int, weights_bytes: int, free_bytes: int,
                                overhead_bytes: int = TRANSFORMERS_OVERHEAD_BYTES) -> float:
    """``--cb-max-memory-percent`` that keeps transformers serve inside its share.

    transformers sizes its paged KV cache as that fraction of the memory free when it builds the
    cache (after loading its weights): ``free_bytes`` (free before the server starts) less the
    weights and its context. The cache may have what the share leaves after weights and overhead.
    """
    room = share_bytes - weights_bytes - overhead_bytes
    if room <= 0:
        raise GPUPlanError(f"llm: its share ({_gib(share_bytes)}) does not hold its weights ({_gib(weights_bytes)}) "
                           f"plus {_gib(overhead_bytes)} of context and activations; raise gpu.llm_fraction")
    free_then = free_bytes - weights_bytes - overhead_bytes
    if free_then <= 0:
        raise GPUPlanError(f"llm: only {_gib(free_bytes)} is free, less than its weights and context")
    return max(0.001, min(1.0, math.floor(room / free_then * 1e4) / 1e4))  # floored: printed with 4 decimals


def managed_llm_server(plan: MemoryPlan | None, config: Config, device: DeviceMemory | None = None,
                       log_path: Path | None = None, replicas: int = 1):
    """A ``ManagedLLMServer`` for a GPU ``llm.server`` (vLLM or transformers serve) on its planned share
    (1/``replicas`` of it: one of ``llm.replicas`` servers; ``device`` read just before this one starts)."""
    from agent.llm_server import LLMServerError, gpu_llm_server
    from agent.mps_qos import child_env

    environ = child_env(config.gpu, "llm")  # the MPS priority / SM share of gpu.mps_llm_* (None: inherit)
    kind = llm_server_kind(config)
    model = llm_model(config)
    extra = shlex.split(config.llm.server_args) + (shlex.split(config.gpu.vllm_extra_args) if kind == "vllm" else [])
    timeout = max(config.llm.server_start_timeout_s, 600.0)
    if kind == "transformers" and (plan is None or plan.share("llm").fraction <= 0):
        # No GPU share (a CPU box, e.g. with --set llm.server_args="--device cpu"): nothing to size.
        return gpu_llm_server("transformers", model, config.gpu.device, extra=extra, start_timeout_s=timeout,
                              log_path=log_path, environ=environ)
    if kind == "llama-server" and (plan is None or plan.share("llm").fraction <= 0):
        # No GPU share (a CPU build of llama.cpp): llm.parallel slots, else one per admitted caller up to 4.
        parallel = config.llm.parallel or max(1, min(4, config.admission.max_sessions))
        return gpu_llm_server("llama-server", model, config.gpu.device, max_model_len=config.llm.context_size,
                              parallel=parallel, served_model_name=config.llm.served_model_name, extra=extra,
                              start_timeout_s=timeout, log_path=log_path, binary=config.llm.server_path,
                              environ=environ)
    if plan is None or plan.share("llm").fraction <= 0:
        raise GPUPlanError(f"llm.server = {kind!r} runs on the GPU but gpu.llm_fraction is 0: give the LLM a share")
    if replicas < 1:
        raise GPUPlanError(f"llm.replicas must be >= 1, got {replicas}")
    share = plan.share("llm")
    share_bytes = share.bytes // replicas
    if kind == "vllm":
        return gpu_llm_server("vllm", model, plan.device, gpu_memory_utilization=share.fraction / replicas,
                              max_model_len=config.llm.context_size, served_model_name=config.llm.served_model_name,
                              extra=extra, start_timeout_s=timeout, log_path=log_path, environ=environ)
    if kind == "transformers":
        weights = weights_bytes(model)
        if weights is None:
            raise LLMServerError(f"llm.model {model!r} is not a local folder: transformers serve runs offline here")
        free = device.free_bytes if device is not None else plan.total_bytes
        try:
            fraction = transformers_cache_fraction(share_bytes, weights, free)
        except GPUPlanError as exc:
            if replicas == 1:
                raise
            raise GPUPlanError(f"{exc} (the share is split {replicas} ways by llm.replicas; lower it)") from None
        return gpu_llm_server("transformers", model, plan.device, cache_memory_fraction=fraction, extra=extra,
                              start_timeout_s=timeout, log_path=log_path, environ=environ)
    if kind == "llama-server":
        parallel = llama_server_slots(model, share_bytes, config, replicas)
        return gpu_llm_server("llama-server", model, plan.device, max_model_len=config.llm.context_size,
                              parallel=parallel, served_model_name=config.llm.served_model_name, extra=extra,
                              start_timeout_s=timeout, log_path=log_path, binary=config.llm.server_path,
                              environ=environ)
    raise GPUPlanError(f"llm.server = {kind!r} does not run on the GPU; set gpu.llm_fraction = 0")


LLAMA_SERVER_BASE_OVERHEAD = 1 << 30  # CUDA context, cuBLAS workspace, graph pools
LLAMA_SERVER_UBATCH = 512  # llama.cpp's default micro-batch: its logits and activations are the compute buffer
# llama.cpp's LLAMA_MAX_SEQ: a context with more sequences fails to load ("n_seq_max must be <= 256")
LLAMA_MAX_SEQ = 256


def llama_server_overhead(n_vocab: int, n_embd: int) -> int:
    """What llama-server holds besides weights and KV cache: a fixed part plus its compute buffer (a
    micro-batch's float32 logits and activations)."""
    return LLAMA_SERVER_BASE_OVERHEAD + LLAMA_SERVER_UBATCH * 4 * (n_vocab + 16 * n_embd)


def llama_server_slots(model: str, share_bytes: int, config: Config, replicas: int = 1) -> int:
    """``llm.parallel``, or (0) as many slots of ``llm.context_size`` tokens as the share holds after the
    weights and the compute buffer, at most one per admitted caller and llama.cpp's 256; a share too small
    for one slot, or for the slots asked for, is refused naming the knobs."""
    from agent.gguf_meta import GGUFError, read_model

    if not model.endswith(".gguf") or not Path(model).is_file():
        raise GPUPlanError(f"llm.server = 'llama-server' needs llm.model to be a local .gguf file, not {model!r}")
    try:
        m = read_model(model)
    except GGUFError as exc:
        raise GPUPlanError(f"llm.model: {exc}") from None
    per_slot = m.kv_bytes_per_token() * config.llm.context_size
    room = share_bytes - m.file_bytes - llama_server_overhead(m.n_vocab, m.n_embd)
    fits = max(0, room // per_slot)
    split = f" (1/{replicas} of it: llm.replicas)" if replicas > 1 else ""
    what = (f"llama-server's share {_gib(share_bytes)}{split} holds the weights {_gib(m.file_bytes)} and "
            f"{fits} slot(s) of llm.context_size = {config.llm.context_size} tokens ({_gib(per_slot)} each)")
    if config.llm.parallel > LLAMA_MAX_SEQ:
        raise GPUPlanError(f"llm.parallel = {config.llm.parallel}: llama-server holds at most {LLAMA_MAX_SEQ} slots "
                           "(llama.cpp's LLAMA_MAX_SEQ); lower llm.parallel or set llm.replicas")
    if config.llm.parallel > 0:
        if config.llm.parallel > fits:
            raise GPUPlanError(f"{what}, not llm.parallel = {config.llm.parallel}: lower llm.parallel or "
                               "llm.context_size, or raise gpu.llm_fraction")
        return config.llm.parallel
    if fits < 1:
        raise GPUPlanError(f"{what}: raise gpu.llm_fraction or lower llm.context_size")
    callers = config.admission.max_sessions * max(1, config.server.workers)
    return int(min(fits, max(1, callers), LLAMA_MAX_SEQ))


def managed_vllm_server(plan: MemoryPlan, config: Config, log_path: Path | None = None):
    """A ``ManagedLLMServer`` running vLLM on its share (start it with ``start``/``astart``)."""
    return managed_llm_server(plan, config, log_path=log_path)


# -------------------------------------------------------------------------- measured after warm-up
@dataclass
class StagePeaks:
    """Each in-process stage's peak CUDA memory while it loads and warms up (torch's allocator)."""

    device: int = 0
    peaks: dict[str, int] = field(default_factory=dict)

    def measure(self, stage: str, fn):
        """Run ``fn()``; record how far the allocator's peak rose above what was held before it."""
        import torch

        if not torch.cuda.is_available():
            return fn()
        torch.cuda.synchronize(self.device)
        before = torch.cuda.memory_allocated(self.device)
        torch.cuda.reset_peak_memory_stats(self.device)
        try:
            return fn()
        finally:
            torch.cuda.synchronize(self.device)
            peak = torch.cuda.max_memory_allocated(self.device) - before
            self.peaks[stage] = self.peaks.get(stage, 0) + max(0, int(peak))


def process_gpu_memory(pid: int, device: int = 0) -> int | None:
    """GPU memory NVML sees held by ``pid`` and its descendants on ``device``; None if NVML cannot tell."""
    try:
        import pynvml
    except ImportError:
        return None
    pids = {pid}
    try:
        import psutil

        pids |= {c.pid for c in psutil.Process(pid).children(recursive=True)}
    except Exception:  # psutil missing or the process is gone: the pid alone
        pass
    try:
        pynvml.nvmlInit()
    except Exception:
        return None
    try:
        visible = os.environ.get("CUDA_VISIBLE_DEVICES", "").strip()
        physical = int(visible.split(",")[device]) if visible and visible.split(",")[0].strip().isdigit() else device
        handle = pynvml.nvmlDeviceGetHandleByIndex(physical)
        procs = pynvml.nvmlDeviceGetComputeRunningProcesses(handle)
        used = [int(p.usedGpuMemory or 0) for p in procs if p.pid in pids]
        return sum(used) if used else None
    except Exception:
        return None
    finally:
        pynvml.nvmlShutdown()


@dataclass(frozen=True)
class StageMemory:
    stage: str
    share_bytes: int
    measured_bytes: int | None
    how: str

    def as_dict(self) -> dict:
        return {"stage": self.stage, "share_gib": round(self.share_bytes / GIB, 3),
                "measured_gib": None if self.measured_bytes is None else round(self.measured_bytes / GIB, 3),
                "how": self.how}


def stage_memory(plan: MemoryPlan, peaks: dict[str, int], llm_kind: str, llm_used: int | None,
                 in_process_reserved: int | None = None) -> list[StageMemory]:
    """Each stage's share and what was measured for it (see the module docstring for how)."""
    out = []
    for comp in IN_PROCESS:
        share = plan.share(comp)
        if share.fraction > 0 or comp in peaks:
            out.append(StageMemory(comp, share.bytes, peaks.get(comp), "torch allocator peak over load + warm-up"))
    llm = plan.share("llm")
    if llm_kind == "vllm":
        out.append(StageMemory("llm", llm.bytes, llm_used, "vLLM --gpu-memory-utilization (NVML reading)"))
    elif llm_kind == "transformers":
        out.append(StageMemory("llm", llm.bytes, llm_used, "NVML: the transformers-serve process after warm-up"))
    elif llm_kind == "llama-server":
        out.append(StageMemory("llm", llm.bytes, llm_used, "NVML: the llama-server process after warm-up"))
    if in_process_reserved is not None:
        cap = sum(plan.share(c).bytes for c in IN_PROCESS)
        out.append(StageMemory("in_process", cap, in_process_reserved, "torch reserved peak since the last reset (cap = asr + tts)"))
    return out


def measured_problems(stages: list[StageMemory], total_bytes: int) -> list[str]:
    """Stages whose measured memory is over their share, one line each naming the stage."""
    found = []
    for st in stages:
        if st.measured_bytes is None or st.measured_bytes <= st.share_bytes:
            continue
        if st.stage == "in_process":
            found.append(f"the Cadence process (asr + tts) holds {_gib(st.measured_bytes)} ({st.how}) but asr + tts "
                         f"have {_gib(st.share_bytes)}; raise gpu.asr_fraction or gpu.tts_fraction")
        elif st.share_bytes <= 0:
            found.append(f"{st.stage} holds {_gib(st.measured_bytes)} on the GPU ({st.how}) but has no share; "
                         f"set gpu.{st.stage}_fraction to at least {st.measured_bytes / total_bytes:.3f}")
        else:
            found.append(f"{st.stage} measured {_gib(st.measured_bytes)} ({st.how}) but its share is "
                         f"{_gib(st.share_bytes)}; raise gpu.{st.stage}_fraction to at least "
                         f"{st.measured_bytes / total_bytes:.3f}")
    return found


def check_measured(stages: list[StageMemory], total_bytes: int) -> list[StageMemory]:
    """Return ``stages`` if every measured stage fits its share; otherwise raise ``GPUPlanError``."""
    found = measured_problems(stages, total_bytes)
    if found:
        raise GPUPlanError("GPU memory plan refused after warm-up:\n  - " + "\n  - ".join(found))
    return stages


@dataclass(frozen=True)
class ServerHealth:
    base_url: str
    model: str
    models_ms: float
    first_token_ms: float
    text: str


def check_llm_server(base_url: str, model: str = "", timeout_s: float = 30.0, kind: str = "llama.cpp",
                     temperature: float = 0.0) -> ServerHealth:
    """Ask an OpenAI-compatible server for its models (transformers serve: its ``/health``) and one
    streamed token; time both. transformers serve fixes its sampling (greedy or not) for good at its
    first request, so that one must carry the temperature the calls will use."""
    import json

    import httpx

    from agent.llm_server import LLMServerError, health_url

    t0 = time.perf_counter()
    url = health_url(base_url, kind)
    try:
        r = httpx.get(url, timeout=timeout_s)
        r.raise_for_status()
        ids = [] if kind == "transformers" else [str(m["id"]) for m in r.json().get("data") or []]
    except (httpx.HTTPError, ValueError, KeyError) as exc:
        path = "/health" if kind == "transformers" else "/models"
        raise LLMServerError(f"LLM server at {base_url} is not healthy: GET {path} failed ({exc})") from None
    models_ms = (time.perf_counter() - t0) * 1000.0
    model = model or (ids[0] if ids else "default")
    body = {"model": model, "stream": True, "max_tokens": 1, "temperature": temperature,
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
