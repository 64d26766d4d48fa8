"""``cadence transcribe-server --workers N``: N host worker processes feeding one engine process.

One Python process handles HTTP, uploads, decoding, planning and stitching at about 3,200 audio
seconds per CPU second, so a fast GPU waits on it. Here this process (the engine process) keeps
only the engine, the cross-request ``WindowBatcher`` and the server-wide audio budget, and starts
N workers (``host_worker``) that do the rest on the other cores:

- the port is held here (port 0 picks one port for all, and nobody takes it between worker restarts).
  ``balance="least_loaded"`` (the default): this process accepts on it and hands each connection to the
  worker with the fewest open connections (``transports.conn_dispatch``), so four 1 h uploads go to four
  workers; ``"kernel"``: it is bound with SO_REUSEPORT and never listens, each worker listens with its own
  SO_REUSEPORT socket and the kernel's hash of the addresses picks one (4 connections over 8 workers share a
  worker 59% of the time, 256 keep-alive connections land up to 1.25x the mean on one);
- each worker talks to this process over its own Unix socket pair: a request's windows go through
  one shared-memory segment (``shm_audio``: written once by the worker, mapped here without a
  copy), its words come back per window (``ipc``, ``engine_host``);
- ``max_inflight`` holds across the workers (``inflight.SharedInflight``), and so does
  ``max_audio_held_s`` (reserved here, in arrival order);
- workers run in their own sessions and die with this process (PDEATHSIG); one that dies is
  restarted (its leftover segments removed); SIGTERM or SIGINT stop every worker (SIGKILL after
  ``STOP_TIMEOUT_S``) before this process returns, so none is left behind.

The API, limits, errors and transcripts are those of the one-process server (``server.serve``):
the same ``TranscriptionServer`` runs in each worker.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import logging
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from asr.offline.engine_host import EngineHost
from asr.offline.inflight import shared_inflight_fd
from asr.offline.ipc import send
from asr.offline.remote_engine import EngineInfo
from asr.offline.server import ServerOptions, stop_on_signals
from asr.offline.shm_audio import remove_segments, segment_prefix
from asr.offline.transcriber import OfflineTranscriber
from transports.conn_dispatch import ConnectionDispatcher

log = logging.getLogger("cadence.transcribe_server")

ROOT = Path(__file__).resolve().parents[2]
MAX_DEFAULT_WORKERS = 8
BACKLOG = 2048
BALANCES = ("least_loaded", "kernel")
STOP_TIMEOUT_S = 10.0
PR_SET_PDEATHSIG = 1


def default_workers(device: str, cores: int | None = None) -> int:
    """Host workers when none are asked for: ``min(cores - 1, 8)`` on a GPU; none on the CPU.

    On the CPU the engine needs every core: a worker only moves the host work to another process
    (the embedded Whisper server: the same CPU per audio hour, no faster; ``bench/results/
    transcribe_server_whisper_cpu_workers{0,1}.json`` and ``transcribe_server_whisper_cpu_ab/``).
    """
    cores = cores or os.cpu_count() or 1
    if not device.startswith("cuda"):
        return 0
    return max(1, min(cores - 1, MAX_DEFAULT_WORKERS))


def _die_with_parent() -> None:
    """``preexec_fn``: the kernel SIGKILLs this child when the thread that started it exits (Linux)."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def listening_socket(host: str, port: int, backlog: int | None = BACKLOG) -> socket.socket:
    """A TCP socket on ``host:port`` (0: any free port) with SO_REUSEPORT, listening unless ``backlog`` is None.

    Each worker listens on its own such socket, so the kernel spreads new connections over the
    workers evenly (by the connection's addresses): one shared socket would let whichever worker
    wakes first take a whole burst of connections, and keep-alive clients would stay on it.
    """
    family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM,
                                                         flags=socket.AI_PASSIVE)[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind(address)
        if backlog is not None:
            sock.listen(backlog)
    except BaseException:
        sock.close()
        raise
    return sock


@dataclass
class _Worker:
    index: int
    proc: subprocess.Popen[bytes] | None = None
    connection: asyncio.Task[None] | None = None
    ready: asyncio.Event = field(default_factory=asyncio.Event)
    restarts: int = 0

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None


class HostPool:
    def __init__(self, transcriber: OfflineTranscriber, options: ServerOptions, workers: int,
                 listen: socket.socket, balance: str = "least_loaded") -> None:
        if workers < 1:
            raise ValueError(f"host workers must be at least 1, not {workers}")
        if balance not in BALANCES:
            raise ValueError(f"balance must be one of {', '.join(BALANCES)}, not {balance!r}")
        self.dispatcher = (ConnectionDispatcher(listen, workers, asyncio.get_running_loop())
                           if balance == "least_loaded" else None)
        self.transcriber = transcriber
        self.options = options
        self.listen = listen
        self.host = EngineHost(transcriber.batcher, options.max_audio_held_s)
        self.info = EngineInfo.of(transcriber.engine)
        self.inflight_fd = shared_inflight_fd(workers)
        self.prefix = segment_prefix(os.getpid())
        self.workers = [_Worker(i) for i in range(workers)]
        self.log_level = logging.getLogger().getEffectiveLevel()

    async def spawn(self, worker: _Worker) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        lane = self.dispatcher.new_lane(worker.index) if self.dispatcher is not None else None
        fds = (theirs.fileno(), self.inflight_fd, *([lane.fileno()] if lane is not None else []))
        cmd = [sys.executable, "-m", "asr.offline.host_worker", "--ipc-fd", str(fds[0]), "--inflight-fd", str(fds[1])]
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
        try:
            worker.proc = subprocess.Popen(cmd, pass_fds=fds, env=env, start_new_session=True,  # noqa: PLW1509
                                           preexec_fn=_die_with_parent)
        finally:
            theirs.close()
            if lane is not None:
                lane.close()
        reader, writer = await asyncio.open_unix_connection(sock=ours)
        send(writer, ("config", {"index": worker.index, "engine": self.info, "options": self.options,
                                 "segments": segment_prefix(os.getpid(), worker.index), "backlog": BACKLOG,
                                 "listen": self.listen.getsockname()[:2],
                                 "conn_fd": fds[2] if lane is not None else None,
                                 "log_level": self.log_level}))
        worker.ready.clear()
        worker.connection = asyncio.ensure_future(
            self.host.serve_worker(reader, writer, on_ready=lambda _: worker.ready.set()))

    async def wait_ready(self, workers: list[_Worker], timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        for w in workers:
            while not w.ready.is_set():
                if not w.alive:
                    code = None if w.proc is None else w.proc.returncode
                    raise RuntimeError(f"host worker {w.index} exited with code {code} while starting")
                if time.monotonic() > deadline:
                    raise RuntimeError(f"host worker {w.index} not ready after {timeout_s:.0f} s")
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(w.ready.wait(), 0.2)

    async def supervise(self, stop: asyncio.Event, poll_s: float = 0.5) -> None:
        """Restart a worker that died (after 1 s, doubling to 30 s while it keeps dying) until ``stop``."""
        backoff = {w.index: 1.0 for w in self.workers}
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), poll_s)
            for w in self.workers:
                if stop.is_set() or w.alive:
                    continue
                code = None if w.proc is None else w.proc.returncode
                log.error("host worker %d died (exit code %s); restarting in %g s", w.index, code, backoff[w.index])
                remove_segments(segment_prefix(os.getpid(), w.index))
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), backoff[w.index])
                if stop.is_set():
                    return
                await self.spawn(w)
                w.restarts += 1
                try:
                    await self.wait_ready([w], 60.0)
                    if self.dispatcher is not None:
                        self.dispatcher.mark_ready(w.index)
                    backoff[w.index] = 1.0
                except RuntimeError as exc:
                    log.error("host worker restart failed: %s", exc)
                    backoff[w.index] = min(30.0, backoff[w.index] * 2)

    async def stop(self) -> None:
        """SIGTERM every worker, SIGKILL what is left after ``STOP_TIMEOUT_S``; reap them all."""
        procs = [w.proc for w in self.workers if w.proc is not None]
        for p in procs:
            if p.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    p.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + STOP_TIMEOUT_S
        while any(p.poll() is None for p in procs) and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        for p in procs:
            if p.poll() is None:
                log.warning("host worker %d did not stop in %g s; killing it", p.pid, STOP_TIMEOUT_S)
                with contextlib.suppress(ProcessLookupError):
                    p.kill()
                p.wait()
        tasks = [w.connection for w in self.workers if w.connection is not None]
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def accept(self) -> None:
        """Start handing connections over (``balance="least_loaded"``), once the workers are ready."""
        if self.dispatcher is not None:
            self.dispatcher.start(BACKLOG)

    def close(self) -> None:
        if self.dispatcher is not None:
            self.dispatcher.close()
        os.close(self.inflight_fd)
        remove_segments(self.prefix)


async def serve_workers(transcriber: OfflineTranscriber, host: str, port: int, workers: int,
                        options: ServerOptions | None = None, on_ready: Callable[[str], None] | None = None,
                        stop: asyncio.Event | None = None, start_timeout_s: float = 120.0,
                        balance: str = "least_loaded") -> None:
    """Serve with ``workers`` host processes until ``stop`` is set (or SIGTERM/SIGINT when none is given);
    ``balance`` says who picks a connection's worker (the module docstring)."""
    options = options or ServerOptions()
    if stop is None:
        stop = asyncio.Event()
        stop_on_signals(stop)
    listen = listening_socket(host, port, backlog=None)  # holds the port; it listens once the workers are ready
    pool = HostPool(transcriber, options, workers, listen, balance)
    try:
        for w in pool.workers:
            await pool.spawn(w)
        await pool.wait_ready(pool.workers, start_timeout_s)
        pool.accept()
        if on_ready is not None:
            on_ready(f"http://{host}:{listen.getsockname()[1]}")
        await pool.supervise(stop)
    finally:
        await pool.stop()
        listen.close()
        pool.close()
        await asyncio.to_thread(transcriber.close)
