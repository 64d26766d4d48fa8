"""``cadence serve --workers N``: N server processes on one port, one LLM server.

One process carries only as many callers as its event loop (pipecat's frames, ~45 ms CPU per
caller-second) and GIL allow. With ``server.workers = N > 1`` this parent process:

- plans GPU memory for the whole config and starts the managed LLM server once (if Cadence owns
  it), supervised as in one process;
- spawns N workers (``python -m agent.cli serve --worker-index I``, the parent's own flags replayed,
  line): each loads its own ASR and TTS; with ``server.balance = "least_loaded"`` (the default) this
  process accepts on the port and hands each connection to the worker with the fewest live calls
  (``transports.conn_dispatch``), with ``"kernel"`` every worker listens on the SAME port with SO_REUSEPORT and
  the kernel's hash picks one; ``admission.max_sessions`` and ``queue_size`` are split N ways (rounded up),
  ``gpu.asr_fraction`` and ``gpu.tts_fraction`` divided by N (each worker caps its torch allocator
  at its part), ``gpu.llm_fraction`` 0 in the workers (the LLM is the parent's, checked there);
- gives each worker ``OMP_NUM_THREADS`` = cores / N unless it is set (torch's intra-op pool);
- restarts a worker that dies (backoff 1 s doubling to 30 s); SIGTERM/SIGINT stop every worker
  (each closes its calls) and the LLM server within ``server.shutdown_timeout_s`` (+ 1 s grace);
- serves ``/metrics`` (the workers' pages merged, ``agent.metrics.merge``), ``POST /metrics/reset``
  (fanned out), ``/health`` (each worker's pid, probe port and sessions) and ``/ready`` (200 when every
  worker is ready and the LLM is up) on ``server.metrics_listen``, default the main port + 1 on
  ``server.host``. Each worker also serves its own on a loopback port (``/health`` lists them).

Workers and the LLM server are children in their own process groups that die with this process
(``spawn_child``: PDEATHSIG), so even a SIGKILLed parent leaves none behind.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field

import httpx
from aiohttp import web
from loguru import logger

from agent.config import Config
from agent.llm_server import free_port
from agent.serve import CadenceServer, install_stop_signals
from agent.supervised_child import spawn_child, stop_child
from transports.conn_dispatch import CONN_FD_ENV, ConnectionDispatcher
from transports.webrtc_peers import PEERS_ENV, PeerRouter

WORKER_ENV = "CADENCE_WORKER_SET"  # JSON list of "section.key=value" overrides, applied last


def cores_available() -> int:
    """The cores this process may run on (its CPU affinity, else the machine's count)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def auto_workers(cfg: Config, cores: int) -> int:
    """``server.workers = 0``: one session process per core the rest of the server leaves: one core each for
    the engine processes (``server.engine_process``: the TTS engines and streaming Parakeet's own) and the LLM
    servers Cadence starts (``llm.replicas`` of them, none with ``llm.base_url``), one for the parent and the
    system; at least one. The session processes are what a phone or WebRTC call's CPU is spent in (H200 runs
    60-62: ~70 ms of a worker's CPU per call-second, eight workers saturated at 128 callers with five cores idle)."""
    engines = 0
    if cfg.server.engine_process:
        engines = cfg.server.tts_engines + (1 if cfg.server.asr_engine_process and cfg.asr.engine == "parakeet" else 0)
    llm_servers = 0 if cfg.llm.base_url else max(1, cfg.llm.replicas)
    return max(1, cores - engines - llm_servers - 1)


def split_budget(total: int, workers: int) -> int:
    """Each worker's part of a per-server budget (rounded up: the sum is never below the total)."""
    return max(1, math.ceil(total / workers)) if total > 0 else total


def worker_overrides(cfg: Config, workers: int, base_url: str, model: str, probe_port: int,
                     engine_socket: str = "", asr_engine_socket: str = "") -> list[str]:
    """The ``--set`` values that make one worker of ``workers`` out of the parent's config; with an engine
    process (``engine_socket``) the workers connect to it and hold no TTS share of their own."""
    tts_fraction = 0.0 if engine_socket else cfg.gpu.tts_fraction / workers
    asr_fraction = 0.0 if engine_socket and cfg.asr.engine == "parakeet" else cfg.gpu.asr_fraction / workers
    engine = [f"server.engine_socket={engine_socket}"] if engine_socket else []
    if asr_engine_socket:
        engine.append(f"server.asr_engine_socket={asr_engine_socket}")
    return [*engine,
        f"llm.base_url={base_url}", f"llm.model={model}", f"llm.api_key={cfg.llm.api_key}", "llm.replicas=1",
        "server.workers=1", f"server.metrics_listen=127.0.0.1:{probe_port}",
        f"admission.max_sessions={split_budget(cfg.admission.max_sessions, workers)}",
        f"admission.queue_size={split_budget(cfg.admission.queue_size, workers)}",
        f"gpu.asr_fraction={asr_fraction!r}", f"gpu.tts_fraction={tts_fraction!r}",
        "gpu.llm_fraction=0.0",
    ]


@dataclass
class Worker:
    index: int
    probe_port: int
    proc: subprocess.Popen | None = None
    restarts: int = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.probe_port}"

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None


@dataclass
class WorkerPool:
    """The parent of ``cadence serve --workers N`` (see the module docstring)."""

    config: Config
    serve_args: list[str]  # the parent's own `serve` flags (--config, --set, --log-level), replayed
    workers: list[Worker] = field(default_factory=list)
    front: CadenceServer | None = None  # holds the managed LLM server and the GPU plan
    stop_event: asyncio.Event | None = None
    start_timeout_s: float = 900.0
    _env: dict[str, str] = field(default_factory=dict)
    _overrides: dict[int, list[str]] = field(default_factory=dict)
    _stopping: bool = False
    dispatcher: ConnectionDispatcher | None = None  # server.balance = least_loaded

    @property
    def n(self) -> int:
        return self.config.server.workers

    def _command(self, worker: Worker) -> list[str]:
        cfg = self.config.server
        return [sys.executable, "-m", "agent.cli", "serve", *self.serve_args, "--host", cfg.host,
                "--port", str(cfg.port), "--worker-index", str(worker.index)]

    def _spawn(self, worker: Worker) -> None:
        env = dict(self._env, **{WORKER_ENV: json.dumps(self._overrides[worker.index])})
        # its WebRTC peers named after it; requests about another worker's peers passed on to that one's probe
        env[PEERS_ENV] = PeerRouter(f"w{worker.index}", {f"w{w.index}": w.url for w in self.workers}).to_json()
        if self.dispatcher is None:
            worker.proc = spawn_child(self._command(worker), nice=self.config.server.worker_nice, env=env)
        else:  # its end of a fresh pair: the connections this process accepts come over it
            with self.dispatcher.new_lane(worker.index) as theirs:
                env[CONN_FD_ENV] = str(theirs.fileno())
                worker.proc = spawn_child(self._command(worker), nice=self.config.server.worker_nice, env=env,
                                          pass_fds=(theirs.fileno(),))
        logger.info(f"worker {worker.index} started (pid {worker.proc.pid}, probe port {worker.probe_port})")

    async def _get(self, http: httpx.AsyncClient, worker: Worker, path: str) -> httpx.Response | None:
        try:
            return await http.get(worker.url + path)
        except httpx.HTTPError:
            return None

    async def _wait_up(self, workers: list[Worker]) -> None:
        deadline = time.monotonic() + self.start_timeout_s
        async with httpx.AsyncClient(timeout=2.0) as http:
            for w in workers:
                while True:
                    if self.stop_event is not None and self.stop_event.is_set():
                        return  # SIGTERM/SIGINT while starting: serve_forever stops everything
                    if not w.alive:
                        code = None if w.proc is None else w.proc.returncode
                        raise RuntimeError(f"worker {w.index} exited with code {code} while starting")
                    r = await self._get(http, w, "/health")
                    if r is not None and r.status_code == 200:
                        break
                    if time.monotonic() > deadline:
                        raise RuntimeError(f"worker {w.index} not up after {self.start_timeout_s:.0f} s")
                    await asyncio.sleep(0.2)

    async def supervise(self, poll_s: float = 0.5) -> None:
        """Restart a worker that died (backoff 1 s doubling to 30 s per worker); until cancelled."""
        backoff = {w.index: 1.0 for w in self.workers}
        while not self._stopping:
            await asyncio.sleep(poll_s)
            for w in self.workers:
                if self._stopping or w.alive:
                    continue
                code = None if w.proc is None else w.proc.returncode
                logger.error(f"worker {w.index} died (exit code {code}); restarting in {backoff[w.index]:g} s")
                await asyncio.sleep(backoff[w.index])
                if self._stopping:
                    return
                self._spawn(w)
                w.restarts += 1
                try:
                    await self._wait_up([w])
                    if self.dispatcher is not None:
                        self.dispatcher.mark_ready(w.index)
                    backoff[w.index] = 1.0
                except RuntimeError as exc:
                    logger.error(f"worker restart failed: {exc}")
                    backoff[w.index] = min(30.0, backoff[w.index] * 2)

    # --- the parent's own endpoints -------------------------------------------------------------

    async def _fan(self, method: str, path: str) -> list[httpx.Response | None]:
        async with httpx.AsyncClient(timeout=10.0) as http:
            async def one(w: Worker) -> httpx.Response | None:
                if not w.alive:
                    return None
                try:
                    return await http.request(method, w.url + path)
                except httpx.HTTPError:
                    return None
            return list(await asyncio.gather(*(one(w) for w in self.workers)))

    async def metrics(self, _request: web.Request) -> web.Response:
        from prometheus_client import CONTENT_TYPE_LATEST

        from agent.metrics.merge import merge_metrics

        pages = [r.text for r in await self._fan("GET", "/metrics") if r is not None and r.status_code == 200]
        alive = sum(w.alive for w in self.workers)
        extra = (f"# HELP cadence_workers worker processes configured\n# TYPE cadence_workers gauge\n"
                 f"cadence_workers {self.n}\n# HELP cadence_workers_scraped workers whose /metrics answered\n"
                 f"# TYPE cadence_workers_scraped gauge\ncadence_workers_scraped {len(pages)}\n"
                 f"# HELP cadence_workers_alive worker processes running\n# TYPE cadence_workers_alive gauge\n"
                 f"cadence_workers_alive {alive}\n")
        body = merge_metrics(pages) + extra
        return web.Response(body=body.encode(), headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def metrics_reset(self, _request: web.Request) -> web.Response:
        answers = await self._fan("POST", "/metrics/reset")
        ok = all(r is not None and r.status_code < 300 for r in answers)
        return web.json_response({"reset": ok, "workers": len(answers)}, status=200 if ok else 502)

    async def health(self, _request: web.Request) -> web.Response:
        answers = await self._fan("GET", "/health")
        rows = []
        for w, r in zip(self.workers, answers, strict=True):
            body = r.json() if r is not None and r.status_code == 200 else None
            lane = self.dispatcher.lanes[w.index] if self.dispatcher is not None else None
            rows.append({"index": w.index, "pid": w.proc.pid if w.proc else None, "probe_port": w.probe_port,
                         "alive": w.alive, "restarts": w.restarts,
                         "sessions": body.get("sessions") if body else None,
                         **({"connections_handed": lane.handed, "load": lane.load} if lane is not None else {})})
        up = all(row["sessions"] is not None for row in rows)
        return web.json_response({"status": "ok" if up else "degraded", "pid": os.getpid(),
                                  "balance": self.config.server.balance,
                                  **({"connections_dropped": self.dispatcher.dropped} if self.dispatcher else {}),
                                  "sessions": sum(row["sessions"] or 0 for row in rows), "workers": rows})

    async def ready(self, _request: web.Request) -> web.Response:
        answers = await self._fan("GET", "/ready")
        bodies = [r.json() if r is not None else None for r in answers]
        active = sum((b or {}).get("active", 0) for b in bodies)
        capacity = sum((b or {}).get("capacity", 0) for b in bodies)
        llm = self.front.llm_server if self.front is not None else None
        down = next((p for p in self.front.engine_procs if not p.up), None) if self.front is not None else None
        reason = ""
        if llm is not None and not llm.up:
            reason = "the LLM server is down (restarting)"
        elif down is not None:
            reason = f"the {down.child_label} is down (restarting)"
        else:
            for w, r, b in zip(self.workers, answers, bodies, strict=True):
                if r is None or r.status_code != 200:
                    reason = f"worker {w.index}: " + ((b or {}).get("reason") or "not answering")
                    break
        ok = not reason
        body = {"ready": ok, "reason": reason or "ok", "active": active, "capacity": capacity,
                "workers": [{"index": w.index, "ready": r is not None and r.status_code == 200}
                            for w, r in zip(self.workers, answers, strict=True)]}
        return web.json_response(body, status=200 if ok else 503)

    def make_app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/metrics", self.metrics)
        app.router.add_post("/metrics/reset", self.metrics_reset)
        app.router.add_get("/health", self.health)
        app.router.add_get("/ready", self.ready)
        return app

    # --- lifetime -------------------------------------------------------------------------------

    def _reserve_port(self) -> socket.socket:
        """Hold the main port so that port 0 picks one port for every worker and nobody else takes it between
        worker restarts: bound with SO_REUSEPORT and never listening (``server.balance = "kernel"``), or the
        socket this process accepts on once the workers are up (``"least_loaded"``)."""
        cfg = self.config.server
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind((cfg.host, cfg.port))
        cfg.port = int(sock.getsockname()[1])
        return sock

    def _stop_workers(self) -> None:
        """SIGTERM every worker at once; each closes its calls; SIGKILL what is left after the timeout."""
        procs = [w.proc for w in self.workers if w.alive]
        for p in procs:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(p.pid, signal.SIGTERM)
        deadline = time.monotonic() + self.config.server.shutdown_timeout_s + 1.0
        for p in procs:
            stop_child(p, max(0.1, deadline - time.monotonic()))

    async def serve_forever(self) -> None:
        cfg = self.config
        self.stop_event = self.stop_event or asyncio.Event()
        loop = asyncio.get_running_loop()
        handled = install_stop_signals(loop, self._on_signal)
        sock: socket.socket | None = None
        runner: web.AppRunner | None = None
        tasks: list[asyncio.Task] = []
        self.front = CadenceServer(cfg)
        try:
            base_url, model = await self.front.start_llm()
            llm = self.front.llm_server
            if llm is not None:
                tasks.append(asyncio.create_task(llm.supervise(), name="llm-supervisor"))
            await self.front.start_engine_process()  # before the workers: they connect to it
            for proc in self.front.engine_procs:
                tasks.append(asyncio.create_task(proc.supervise(), name=f"{proc.child_label} supervisor"))
            sock = self._reserve_port()
            if cfg.server.balance == "least_loaded":
                self.dispatcher = ConnectionDispatcher(sock, self.n, loop)
            self.workers = [Worker(i, free_port()) for i in range(self.n)]
            self._overrides = {w.index: worker_overrides(cfg, self.n, base_url, model, w.probe_port,
                                                         cfg.server.engine_socket, cfg.server.asr_engine_socket)
                               for w in self.workers}
            self._env = dict(os.environ, HF_HUB_OFFLINE=os.environ.get("HF_HUB_OFFLINE", "1"))
            # N workers each with one intra-op thread per core would oversubscribe the cores N times.
            self._env.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // self.n)))
            for w in self.workers:
                self._spawn(w)
            await self._wait_up(self.workers)
            if self.stop_event.is_set():
                return
            tasks.append(asyncio.create_task(self.supervise(), name="worker-supervisor"))
            if self.dispatcher is not None:
                self.dispatcher.start(backlog=1024)
            host, _, mport = (cfg.server.metrics_listen or f"{cfg.server.host}:{cfg.server.port + 1}").rpartition(":")
            runner = web.AppRunner(self.make_app(), shutdown_timeout=1.0)
            await runner.setup()
            await web.TCPSite(runner, host or "127.0.0.1", int(mport)).start()
            logger.info(f"{self.n} workers on port {cfg.server.port} (pids "
                        f"{', '.join(str(w.proc.pid) for w in self.workers if w.proc)}); summed /metrics, "
                        f"/health and /ready on http://{host or '127.0.0.1'}:{mport}/")
            print(f"Cadence is ready: open http://{cfg.server.host}:{cfg.server.port}/ in a browser and click Talk "
                  f"({self.n} workers; metrics on http://{host or '127.0.0.1'}:{mport}/metrics)", flush=True)
            if not self.stop_event.is_set():
                await self.stop_event.wait()
            logger.info("shutting down: stopping workers and the LLM server")
        finally:
            self._stopping = True
            for sig in handled:
                loop.remove_signal_handler(sig)
            for t in tasks:
                t.cancel()
            await asyncio.to_thread(self._stop_workers)
            if runner is not None:
                with contextlib.suppress(Exception):
                    await runner.cleanup()
            self.front.stop_children()
            if self.dispatcher is not None:
                self.dispatcher.close()
            if sock is not None:
                sock.close()

    def _on_signal(self, sig: signal.Signals) -> None:
        logger.info(f"received {sig.name}")
        if self.stop_event is not None:
            if self.stop_event.is_set():  # a second signal: stop waiting for anything
                raise SystemExit(128 + sig)
            self.stop_event.set()
