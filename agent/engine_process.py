"""The engine process (``server.engine_process = true``): one process owns the GPU TTS for every session process.

``cadence serve`` (the parent, before its workers when ``--workers N``) starts
``python -m agent.engine_server`` on a Unix socket in a private temporary folder, waits for its ``hello``
(sent only after the engine is loaded and warmed), and hands the socket to the session processes
(``server.engine_socket``), whose TTS stage is then ``tts.remote.client.RemoteTTSEngine``. The child
runs in its own process group and dies with its parent (``spawn_child``). ``supervise`` restarts it with
backoff (0.5 s doubling to 30 s) when it dies; ``up`` is False meanwhile (``/ready`` answers 503, and
the sessions' TTS streams fail at once with ``EngineUnavailable``, an ``ErrorFrame`` in the pipeline).
``stop`` (SIGTERM, SIGKILL after the timeout) removes the folder and its socket.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from loguru import logger

from agent.config import Config
from agent.mps_qos import child_env
from agent.supervised_child import SupervisedChild, spawn_child, stop_child


class EngineProcessError(RuntimeError):
    """The engine process could not be started or did not become ready."""


def engine_spec(config: Config, hosts: tuple[str, ...] = ("tts", "asr")) -> dict[str, Any]:
    """What the engine process builds: the ``[tts]`` section (a Piper voice resolved here: the engine
    process does not import ``agent``), with ``asr.engine = "parakeet"`` the ``[asr]`` section, and with
    ``vad.turn_model = "engine"`` smart-turn (``turn``); only the stages in ``hosts``."""
    spec: dict[str, Any] = {}
    if "asr" in hosts and config.asr.engine == "parakeet":
        spec["asr"] = dataclasses.asdict(config.asr)
    if "turn" in hosts and config.vad.turn_model == "engine":
        spec["turn"] = {"device": config.vad.turn_device, "weights": config.vad.turn_weights}
    if "tts" not in hosts:
        return spec
    tts = dataclasses.asdict(config.tts)
    if tts["engine"] in ("auto", "piper") and not tts["voice"]:
        from agent.models import piper_voice

        try:
            tts["voice"] = str(piper_voice())
        except FileNotFoundError:
            if tts["engine"] == "piper":
                raise
    spec["tts"] = tts
    return spec


def turn_host(config: Config, hosts: tuple[str, ...], index: int = 0) -> bool:
    """Whether the engine process for ``hosts`` (the ``index``-th TTS one) hosts smart-turn: the one with
    Parakeet, else the first TTS engine process (``turn_socket`` is the session side of the same rule)."""
    if config.vad.turn_model != "engine":
        return False
    split = config.server.asr_engine_process and config.asr.engine == "parakeet"
    return "asr" in hosts if split else ("tts" in hosts and index == 0)


def turn_socket(config: Config) -> str:
    """The socket of the engine process that hosts smart-turn (``turn_host``); empty: none started."""
    return config.server.asr_engine_socket or (config.server.engine_sockets or [""])[0]


@dataclass
class ManagedEngineProcess(SupervisedChild):
    """``python -m agent.engine_server`` on a private Unix socket, supervised (see the module docstring)."""

    child_label: ClassVar[str] = "TTS engine process"  # hosting streaming Parakeet too, unless split
    restart_errors: ClassVar[tuple[type[BaseException], ...]] = (EngineProcessError,)

    spec: dict[str, Any]
    start_timeout_s: float = 600.0
    log_path: Path | None = None
    memory_fraction: float = 0.0  # the engine's torch allocator cap (its GPU share); 0: none
    device: int = 0
    switch_interval_ms: float = 0.0  # the engine's GIL switch interval; 0: Python's default
    report_s: float = 0.0  # the engine logs its load this often (0: never)
    stall_exit_s: float = 0.0  # the engine exits (and is restarted) when a batcher's tick runs this long (0: never)
    gc_freeze: bool = False  # the engine freezes its GC heap once warm (runtime.gc_freeze)
    max_backoff_s: float = 30.0
    env: dict[str, str] | None = None
    process: subprocess.Popen | None = field(default=None, init=False)
    info: dict[str, Any] = field(default_factory=dict, init=False)  # the last hello: name, rate, pid, memory
    up: bool = field(default=False, init=False)
    restarts: int = field(default=0, init=False)
    _dir: str = field(default="", init=False)
    _stopping: bool = field(default=False, init=False)

    @classmethod
    def for_config(cls, config: Config, memory_fraction: float = 0.0,
                   hosts: tuple[str, ...] = ("tts", "asr"), index: int = 0) -> ManagedEngineProcess:
        """The engine process for ``hosts`` of ``config``; an ASR-only one logs to ``engine_log`` + ``-asr``, the
        ``index``-th extra TTS engine (``server.tts_engines``) to ``engine_log`` + ``-tts{index + 1}``."""
        from agent.runtime import switch_interval_ms

        log = Path(config.server.engine_log) if config.server.engine_log else None
        if log is not None and "tts" not in hosts:
            log = log.with_name(f"{log.stem}-asr{log.suffix}")
        elif log is not None and index:
            log = log.with_name(f"{log.stem}-tts{index + 1}{log.suffix}")
        interval = switch_interval_ms(config.runtime.gil_switch_interval_ms, config.asr.engine, config.asr.device)
        kind = cls if "tts" in hosts else ManagedASREngineProcess
        if turn_host(config, hosts, index):
            hosts = (*hosts, "turn")
        return kind(engine_spec(config, hosts), log_path=log, memory_fraction=memory_fraction,
                    device=config.gpu.device, switch_interval_ms=interval or 0.0,
                    report_s=config.server.engine_report_s,
                    stall_exit_s=config.server.engine_stall_exit_s, gc_freeze=config.runtime.gc_freeze,
                    env=child_env(config.gpu, "tts" if "tts" in hosts else "asr"))  # gpu.mps_* (None: inherit)

    @property
    def socket_path(self) -> str:
        if not self._dir:
            self._dir = tempfile.mkdtemp(prefix="cadence-engine-")  # mode 0700: this user only
        return str(Path(self._dir) / "engine.sock")

    @property
    def peaks(self) -> dict[str, int]:
        """Per hosted stage (tts, asr): the engine's CUDA allocator peak over load + warm-up (empty off CUDA)."""
        return {k: int(v) for k, v in (self.info.get("peaks") or {}).items()}

    def command(self) -> list[str]:
        return [sys.executable, "-m", "agent.engine_server", "--socket", self.socket_path,
                "--spec", json.dumps(self.spec), "--memory-fraction", repr(self.memory_fraction),
                "--device", str(self.device), "--switch-interval-ms", repr(self.switch_interval_ms),
                "--report-s", repr(self.report_s), "--stall-exit-s", repr(self.stall_exit_s),
                *(["--gc-freeze"] if self.gc_freeze else [])]

    def _spawn(self) -> subprocess.Popen:
        log = open(self.log_path, "ab") if self.log_path else None  # noqa: SIM115  (None: our own stderr)
        self.process = spawn_child(self.command(), stdout=log, stderr=subprocess.STDOUT if log else None,
                                   env=self.env)
        return self.process

    def _wait_ready(self, proc: subprocess.Popen) -> None:
        from tts.remote.client import EngineUnavailable, hello

        t0 = time.monotonic()
        while True:
            if proc.poll() is not None:
                raise EngineProcessError(f"the engine process exited with code {proc.returncode} while starting")
            try:
                self.info = hello(self.socket_path, 2.0)
                break
            except EngineUnavailable:
                if time.monotonic() - t0 > self.start_timeout_s:
                    raise EngineProcessError(f"the engine process not ready after {self.start_timeout_s:.0f} s") \
                        from None
                time.sleep(0.1)
        hosted = " + ".join(x for x in (self.info.get("name"), "parakeet" if self.info.get("asr") else None) if x)
        logger.info(f"{self.child_label} ready: {hosted} (pid {proc.pid}) on {self.socket_path} "
                    f"in {time.monotonic() - t0:.1f} s")

    def stop(self, timeout_s: float = 5.0) -> None:
        self._stopping = True
        self.up = False
        proc, self.process = self.process, None
        stop_child(proc, timeout_s)
        if self._dir:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = ""


@dataclass
class ManagedASREngineProcess(ManagedEngineProcess):
    """An engine process hosting streaming Parakeet alone (``server.asr_engine_process``)."""

    child_label: ClassVar[str] = "ASR engine process"
