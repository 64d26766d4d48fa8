"""``cadence serve``: the HTTP server with the WebRTC page, signalling, health and readiness.

Start-up order: LLM server (if Cadence owns it) -> engines loaded and warmed -> GC frozen ->
listening. Every caller gets a fresh pipeline on the shared engines, behind the admission gate,
with the session limits of ``[session]`` (connect timeout, idle, maximum duration). Every route
is behind ``agent.security`` (API key, Origin allow-list). A managed LLM server is supervised
(restarted when it dies; ``/ready`` is 503 meanwhile). SIGTERM and SIGINT both run the same clean
shutdown: every live call hears ``server.goodbye``, calls closed, children stopped, all within
``server.shutdown_timeout_s``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import secrets
import signal
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiohttp import web
from loguru import logger

from agent.admission import AdmissionGate
from agent.config import Config, ConfigError
from agent.goodbye import say_goodbye
from agent.live_feed import LiveFeed
from agent.llm_server import embedded_llama_server
from agent.mps_qos import STAGES, mps_env
from agent.pipeline import Engines
from agent.runtime import freeze_gc_heap, preload_call_modules
from agent.security import middleware
from agent.session import SessionLimits, SessionWatch, run_session
from agent.turn_observer import TurnObserver
from transports.input_rate import InputRateLimiter

# Of the shutdown budget, what the goodbyes leave for closing calls and stopping children.
CLOSE_RESERVE_S = 1.0
# After the goodbye's audio is sent, the far end may still hold a little of it (the phone line's lead).
GOODBYE_TAIL_S = 0.2

# Extensions (metrics, phone transport, ...) register routes and observers through hooks.
RouteHook = Callable[[web.Application, "CadenceServer"], None]



def turn_records(turns: TurnObserver, text: bool, last: int = 100) -> list[dict[str, Any]]:
    """A call's last ``last`` turns: latencies (ms), event times (monotonic s), and with ``text`` what was said."""
    return [{**({"transcript": t.transcript_text, "reply": t.reply_text.strip()} if text else {}),
             "interrupted": t.interrupted, "latency_ms": {k: round(v, 1) for k, v in t.stages_ms().items()},
             "llm_requests": t.llm_requests, "at": t.event_times()}
            for t in turns.turns[-last:]]


def install_stop_signals(loop: asyncio.AbstractEventLoop, on_signal: Callable[[signal.Signals], None]) -> list:
    """``on_signal(sig)`` on SIGTERM and SIGINT where the loop supports it; returns the signals handled."""
    handled = []
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            loop.add_signal_handler(sig, on_signal, sig)
            handled.append(sig)
    return handled

@dataclass
class CadenceServer:
    config: Config
    engines: Engines | None = None
    llm_server: Any = None  # ManagedLLMServer (embedded llama.cpp) or agent.llm_replicas.LLMServerGroup (GPU servers)
    engine_proc: Any = None  # agent.engine_process.ManagedEngineProcess with server.engine_process
    asr_engine_proc: Any = None  # its ASR-only sibling with server.asr_engine_process
    extra_tts_procs: list[Any] = field(default_factory=list)  # TTS engine processes 2..N (server.tts_engines)
    gate: AdmissionGate | None = None
    signalling: Any = None  # transports.webrtc.WebRTCSignalling when aiortc is installed
    observer_factories: list[Callable[[str], Any]] = field(default_factory=list)
    route_hooks: list[RouteHook] = field(default_factory=list)
    sessions: dict[str, TurnObserver] = field(default_factory=dict)
    max_session_records: int = 200
    memory_plan: Any = None  # agent.gpu_memory.MemoryPlan when the config puts stages on a GPU
    gpu_memory: list[Any] = field(default_factory=list)  # StageMemory per stage, measured after warm-up
    llm_kind: str = "llama.cpp"
    live: dict[str, SessionWatch] = field(default_factory=dict)
    # Paths whose handlers authenticate their own callers (extensions add to it).
    self_authenticated: set[str] = field(default_factory=set)
    stop_event: asyncio.Event | None = None
    # Set in a worker of ``cadence serve --workers N`` (agent.workers): the main port is shared with
    # the other workers and the loopback probe also takes ``POST /metrics/reset``.
    worker_index: int | None = None
    # ... and with server.balance = least_loaded, the descriptor the parent hands connections over (transports.conn_dispatch)
    conn_fd: int | None = None
    # ... and its WebRTC peers' names and the other workers' probes (transports.webrtc_peers.PeerRouter)
    peer_router: Any = None
    bot: Any = None  # agent.bot.Bot served by every call (``cadence serve --bot``)

    async def start_llm(self) -> tuple[str, str]:
        """GPU memory plan (refuse to start if it cannot fit) -> the LLM server if Cadence owns it
        (its first answer checked); returns the LLM's base URL and model."""
        from agent.gpu_memory import COMPONENTS, llm_server_kind, plan_for, read_device_memory
        from agent.llm_server import GPU_SERVERS

        cfg = self.config
        on_gpu = any(getattr(cfg.gpu, f"{c}_fraction") for c in COMPONENTS)
        device = read_device_memory(cfg.gpu.device) if on_gpu else None
        plan = plan_for(cfg, device)  # None unless the config gives GPU shares; raises GPUPlanError
        self.memory_plan = plan
        if plan is not None:
            logger.info(f"GPU memory plan:\n{plan.summary()}")
        qos = {stage: env for stage in STAGES if (env := mps_env(cfg.gpu, stage))}  # refuses a setting out of range
        if qos:
            logger.info(f"CUDA MPS quality of service per stage (agent/mps_qos.py): {qos}")
        kind = self.llm_kind = llm_server_kind(cfg)
        base_url, model = cfg.llm.base_url, cfg.llm.model
        if cfg.llm.replicas < 1 or (cfg.llm.replicas > 1 and (base_url or kind not in GPU_SERVERS)):
            raise ConfigError(f"llm.replicas = {cfg.llm.replicas}: Cadence starts replicas of a GPU server only "
                              f"(llm.server = {' or '.join(GPU_SERVERS)}, llm.base_url empty); to spread calls "
                              f"over servers of your own, list them in llm.base_url, comma-separated")
        log = Path(cfg.llm.server_log) if cfg.llm.server_log else None
        if not base_url and kind in GPU_SERVERS:
            self.llm_server = await self._start_gpu_llm(plan, device, log)
            base_url, model = self.llm_server.base_url, self.llm_server.model_id
        elif not base_url:
            # A fresh key per run: other local users cannot use the managed model server.
            cfg.llm.api_key = secrets.token_urlsafe(24)
            self.llm_server = embedded_llama_server(cfg.llm.threads, cfg.llm.context_size, cfg.llm.model,
                                                    cfg.llm.server_start_timeout_s, log, api_key=cfg.llm.api_key,
                                                    nice=cfg.llm.nice)
            await self.llm_server.astart()
            base_url, model = self.llm_server.base_url, self.llm_server.model_id
        return base_url, model

    async def _start_gpu_llm(self, plan: Any, device: Any, log: Path | None) -> Any:
        """The GPU LLM servers (``llm.replicas``, 1 by default), one after another: each is started and answers
        once (its first request builds its KV cache, sized from the memory free just before it started)
        before the next starts, and all of them before ASR and TTS take their memory."""
        from agent.gpu_memory import check_llm_server, managed_llm_server, read_device_memory
        from agent.llm_replicas import LLMServerGroup

        cfg = self.config
        n = cfg.llm.replicas
        group = self.llm_server = LLMServerGroup()  # stop_children stops those already up if a later one fails
        for i in range(n):
            if i and device is not None:
                device = read_device_memory(cfg.gpu.device)
            path = log if log is None or n == 1 else log.with_name(f"{log.stem}-{i}{log.suffix}")
            server = managed_llm_server(plan, cfg, device, log_path=path, replicas=n)
            group.servers.append(server)
            await server.astart()
            health = await asyncio.to_thread(check_llm_server, server.base_url, server.model_id, 300.0,
                                             self.llm_kind, cfg.llm.temperature)
            label = f"LLM ({self.llm_kind})" + (f" replica {i + 1}/{n}" if n > 1 else "")
            logger.info(f"{label} first token in {health.first_token_ms:.0f} ms")
        return group

    async def start_engine_process(self) -> None:
        """With ``server.engine_process`` (and no engine socket given by a parent): start the engine process
        (TTS, and streaming Parakeet) on their shares of the plan, and point this config's sessions at it."""
        from agent.engine_process import ManagedEngineProcess

        cfg = self.config
        if not cfg.server.engine_process or cfg.server.engine_socket:
            return
        plan = self.memory_plan
        split = cfg.server.asr_engine_process and cfg.asr.engine == "parakeet"
        hosted = ["tts", *(["asr"] if cfg.asr.engine == "parakeet" and not split else [])]
        fraction = sum(plan.share(c).fraction for c in hosted) if plan is not None else 0.0
        n = max(1, cfg.server.tts_engines)
        tts_fraction = plan.share("tts").fraction if plan is not None else 0.0
        self.engine_proc = ManagedEngineProcess.for_config(cfg, fraction - tts_fraction * (n - 1) / n, tuple(hosted))
        self.extra_tts_procs = [ManagedEngineProcess.for_config(cfg, tts_fraction / n, ("tts",), index=i)
                                for i in range(1, n)]
        starts = [p.astart() for p in (self.engine_proc, *self.extra_tts_procs)]
        if split:
            asr_fraction = plan.share("asr").fraction if plan is not None else 0.0
            self.asr_engine_proc = ManagedEngineProcess.for_config(cfg, asr_fraction, ("asr",))
            starts.append(self.asr_engine_proc.astart())
        results = await asyncio.gather(*starts, return_exceptions=True)  # both load at once
        for result in results:
            if isinstance(result, BaseException):
                self.stop_children()
                raise result
        cfg.server.engine_socket = ",".join(p.socket_path for p in (self.engine_proc, *self.extra_tts_procs))
        if self.asr_engine_proc is not None:
            cfg.server.asr_engine_socket = self.asr_engine_proc.socket_path

    @property
    def engine_procs(self) -> list[Any]:
        """The engine processes this server started (TTS and ASR, or one hosting both)."""
        return [p for p in (self.engine_proc, *self.extra_tts_procs, self.asr_engine_proc) if p is not None]

    def stop_children(self) -> None:
        """The LLM server and the engine process, if Cadence started them."""
        if self.llm_server is not None:
            self.llm_server.stop()
        for proc in self.engine_procs:
            proc.stop()

    async def start_engines(self) -> None:
        """``start_llm`` -> engines, each in-process model's peak measured while it loads and warms ->
        measured memory checked. The caller freezes the GC heap (``freeze_heap``) once the app is built too."""
        from agent.gpu_memory import StagePeaks, apply_in_process_fraction

        cfg = self.config
        base_url, model = await self.start_llm()
        plan = self.memory_plan
        peaks = StagePeaks(plan.device) if plan is not None else None
        # With the engine process hosting both GPU stages this process never touches CUDA: no context of
        # its own (the card sees the engine's and the LLM's), nothing to cap or measure here.
        gpu_here = not ((cfg.server.engine_process or cfg.server.engine_socket) and cfg.asr.engine == "parakeet")
        if plan is not None and gpu_here:
            apply_in_process_fraction(plan)
        try:
            await self.start_engine_process()
            measure = peaks.measure if peaks is not None and gpu_here else None
            self.engines = await asyncio.to_thread(Engines.load, cfg, base_url, model, measure)
            if self.engine_proc is not None and peaks is not None:  # the TTS's (and ASR's) memory is the engine's
                peaks.peaks.pop("tts", None)
                if self.engines.remote_asr:
                    peaks.peaks.pop("asr", None)
                for proc in self.engine_procs:  # N TTS engine processes: their peaks add up
                    for stage, peak in proc.peaks.items():
                        peaks.peaks[stage] = peaks.peaks.get(stage, 0) + peak
            self.engines.bot = self.bot
            if self.bot is not None and self.bot.tools:  # the prompt with the tool list, cached too
                await asyncio.to_thread(self.engines.warm_llm)
            if plan is not None and peaks is not None:
                self.gpu_memory = self.check_gpu_memory(peaks)
        except BaseException:
            self.stop_children()
            raise

    def freeze_heap(self) -> None:
        """After the engines and the app: import what a call imports on its first use, then freeze the GC heap
        (``runtime.gc_freeze``), so a call's collections walk its own objects, not the libraries'."""
        if self.config.runtime.gc_freeze:
            engines = self.engines
            loaded = preload_call_modules(self.config.asr.engine, self.config.vad.turn_model,
                                          bool(getattr(engines, "remote_asr", False)))
            logger.debug(f"preloaded {len(loaded)} modules a call imports on first use")
            freeze_gc_heap()

    def check_gpu_memory(self, peaks: Any) -> list[Any]:
        """Each stage's measured memory after warm-up against its share; raises ``GPUPlanError``."""
        from agent.gpu_memory import GIB, check_measured, measured_problems

        stages = self.gpu_memory_now(peaks.peaks)
        for st in stages:
            shown = "unmeasured" if st.measured_bytes is None else f"{st.measured_bytes / GIB:.2f} GiB"
            logger.info(f"GPU memory after warm-up: {st.stage} {shown} of {st.share_bytes / GIB:.2f} GiB ({st.how})")
        assert self.memory_plan is not None
        if not self.config.gpu.check_measured:
            for problem in measured_problems(stages, self.memory_plan.total_bytes):
                logger.warning(f"GPU memory over plan (gpu.check_measured = false, not refused): {problem}")
            return stages
        return check_measured(stages, self.memory_plan.total_bytes)

    def gpu_memory_now(self, peaks: dict[str, int] | None = None) -> list[Any]:
        """Per stage: its share, and its measured memory now (warm-up peaks for ASR and TTS, NVML for the
        LLM server, torch's reserved total for the Cadence process)."""
        from agent.gpu_memory import process_gpu_memory, stage_memory

        plan = self.memory_plan
        if plan is None:
            return []
        pids = self.llm_server.pids if self.llm_server is not None else []
        used = [process_gpu_memory(pid, plan.device) for pid in pids]
        llm_used = None if not used or any(u is None for u in used) else sum(used)
        reserved = None
        torch = sys.modules.get("torch")
        if torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized():
            reserved = int(torch.cuda.max_memory_reserved(plan.device))
        if peaks is None:
            peaks = {st.stage: st.measured_bytes for st in self.gpu_memory
                     if st.stage in ("asr", "tts") and st.measured_bytes is not None}
        return stage_memory(plan, peaks, self.llm_kind, llm_used, reserved)

    def observers_for(self, session_id: str) -> list[Any]:
        return [factory(session_id) for factory in self.observer_factories]

    async def run_caller(self, transport: Any, session_id: str, pre_stages: tuple = (),
                         observers: tuple = (), audio_out_sample_rate: int | None = None) -> None:
        assert self.engines is not None
        feed = self.live_feed(session_id)
        turns = TurnObserver(on_turn=feed.on_turn if feed is not None else None,
                             on_text=feed.on_text if feed is not None else None)
        self.sessions[session_id] = turns
        while len(self.sessions) > self.max_session_records:
            oldest = next(iter(self.sessions))
            if oldest == session_id:
                break
            self.sessions.pop(oldest)
        limits = SessionLimits(self.config.session.idle_timeout_s, self.config.session.max_duration_s,
                               max_duration_goodbye=self.config.call.max_duration_goodbye)
        if not getattr(transport, "has_input_rate_cap", False) and self.config.session.max_input_rt_ratio > 0:
            # WebRTC hands over RTP as fast as a peer sends it: cap it as the phone line caps itself
            pre_stages = (InputRateLimiter(self.config.session.max_input_rt_ratio, self.config.session.input_burst_s),
                          *pre_stages)
        watch = SessionWatch()
        self.live[session_id] = watch
        try:
            await run_session(self.engines, transport, session_id,
                              observers=[turns, *self.observers_for(session_id), *observers], pre_stages=pre_stages,
                              audio_out_sample_rate=audio_out_sample_rate, limits=limits, watch=watch)
        finally:
            self.live.pop(session_id, None)
            if self.config.server.log_call_turns and turns.turns:
                logger.info(f"session {session_id}: turns {json.dumps(turn_records(turns, False))}")

    def live_feed(self, session_id: str) -> LiveFeed | None:
        """The page's view of a WebRTC call (its data channel); None for other transports."""
        conn = self.signalling.connections.get(session_id) if self.signalling is not None else None
        if conn is None:
            return None
        gate = self.gate
        return LiveFeed(conn.send_app_message, (lambda: gate.ready()[1]) if gate is not None else None)

    async def say_goodbyes(self) -> None:
        """Shutdown: every live call hears ``server.goodbye``, all at once, within the shutdown budget
        less ``CLOSE_RESERVE_S``; the calls are closed afterwards."""
        text = self.config.server.goodbye.strip()
        workers = {sid: w.worker for sid, w in list(self.live.items()) if w.worker is not None}
        if not text or not workers:
            return
        budget = max(0.0, self.config.server.shutdown_timeout_s - CLOSE_RESERVE_S)
        t0 = time.monotonic()
        said = await asyncio.gather(*(say_goodbye(worker, text, budget - GOODBYE_TAIL_S, f"session {sid}")
                                      for sid, worker in workers.items()))
        if any(said):
            await asyncio.sleep(min(GOODBYE_TAIL_S, max(0.0, budget - (time.monotonic() - t0))))
        logger.info(f"shutdown: goodbye said on {sum(said)} of {len(said)} calls "
                    f"in {time.monotonic() - t0:.1f} s")

    def running_sessions(self) -> int:
        """Sessions whose caller audio is flowing now (the overload judgement counts only these)."""
        now = time.monotonic()
        return sum(1 for w in list(self.live.values()) if w.running(now))

    async def session_info(self, request: web.Request) -> web.Response:
        """Recent turns of one session: transcripts and replies (if ``phone.expose_transcripts``), latencies."""
        turns = self.sessions.get(request.match_info["session_id"])
        if turns is None:
            return web.json_response({"error": "no such session"}, status=404)
        return web.json_response({"turns": turn_records(turns, self.config.phone.expose_transcripts)})

    def make_app(self) -> web.Application:
        cfg = self.config
        self.gate = self.gate or AdmissionGate(cfg.admission)
        self.gate.set_running(self.running_sessions)
        app = web.Application(client_max_size=256 * 1024, middlewares=[
            middleware(cfg.server.api_key, cfg.server.allowed_origins, self.self_authenticated)])
        try:  # WebRTC needs aiortc and av; the phone line does not (GPU machines may carry only that)
            from transports.ice import parse_ice_hosts, restrict_ice_hosts
            from transports.params import transport_params
            from transports.webrtc import WebRTCSignalling, add_routes
        except ImportError as exc:
            logger.warning(f"WebRTC is off ({exc}); install aiortc and av for the browser page")
        else:
            restrict_ice_hosts(parse_ice_hosts(cfg.server.webrtc_ice_hosts))
            self.signalling = WebRTCSignalling(
                self.run_caller, transport_params(cfg.audio.in_sample_rate, cfg.audio.out_sample_rate), self.gate,
                connect_timeout_s=cfg.session.connect_timeout_s, jitter_frames=cfg.session.webrtc_jitter_frames,
                router=self.peer_router,
            )
            add_routes(app, self.signalling)
        app.router.add_get("/health", self.health)
        app.router.add_get("/ready", self.ready)
        app.router.add_get("/api/sessions/{session_id}", self.session_info)
        for hook in self.route_hooks:
            hook(app, self)
        app.on_cleanup.append(self._cleanup)
        return app

    async def health(self, _request: web.Request) -> web.Response:
        return web.json_response({"status": "ok", "sessions": self.gate.active if self.gate else 0,
                                  "pid": os.getpid(), "worker": self.worker_index})

    def probe_app(self, app: web.Application) -> web.Application:
        """/metrics, /health and /ready without the key, for ``server.metrics_listen``."""
        probe = web.Application()
        for key, value in app.items():  # the metrics bundle and whatever else handlers read
            probe[key] = value
        probe.router.add_get("/health", self.health)
        probe.router.add_get("/ready", self.ready)
        for route in app.router.routes():
            info = route.resource.get_info() if route.resource is not None else {}
            if info.get("path") == "/metrics" and route.method == "GET":
                probe.router.add_get("/metrics", route.handler)
            # A worker's probe is on loopback for its parent, which fans the reset out.
            if info.get("path") == "/metrics/reset" and route.method == "POST" and self.worker_index is not None:
                probe.router.add_post("/metrics/reset", route.handler)
        if self.peer_router is not None and self.signalling is not None:  # another worker passes its requests on
            probe.router.add_post("/api/offer", self._forwarded(self.signalling.offer))
            probe.router.add_patch("/api/offer", self._forwarded(self.signalling.patch))
        return probe

    def _forwarded(self, handler: Callable[[web.Request], Awaitable[web.Response]]) -> Any:
        """Another worker's request about a live peer of this one, and nothing else: no new call starts on the
        key-less probe (an offer naming an unknown peer would make one)."""
        async def forwarded(request: web.Request) -> web.Response:
            try:
                pc_id = (await request.json()).get("pc_id")
            except (ValueError, AttributeError):
                pc_id = None
            if not isinstance(pc_id, str):
                return web.json_response({"error": "only requests about an existing peer are taken here"},
                                         status=403)
            if self.signalling is None or pc_id not in self.signalling.connections:
                return web.json_response({"error": "peer connection not found"}, status=404)
            return await handler(request)
        return forwarded

    async def ready(self, _request: web.Request) -> web.Response:
        assert self.gate is not None
        if self.stop_event is not None and self.stop_event.is_set():
            body = {"ready": False, "reason": "shutting down", "active": self.gate.active,
                    "capacity": self.gate.capacity}
            return web.json_response(body, status=503)
        if self.llm_server is not None and not self.llm_server.up:
            body = {"ready": False, "reason": "the LLM server is down (restarting)", "active": self.gate.active,
                    "capacity": self.gate.capacity}
            return web.json_response(body, status=503)
        down = next((p for p in self.engine_procs if not p.up), None)
        if down is not None:
            body = {"ready": False, "reason": f"the {down.child_label} is down (restarting)",
                    "active": self.gate.active, "capacity": self.gate.capacity}
            return web.json_response(body, status=503)
        ok, reason = self.gate.ready()
        body = {"ready": ok, "reason": reason, "active": self.gate.active, "capacity": self.gate.capacity}
        return web.json_response(body, status=200 if ok else 503)

    async def _cleanup(self, _app: web.Application) -> None:
        if self.signalling is not None:
            await self.signalling.close(self.config.server.shutdown_timeout_s)
        if self.llm_server is not None:
            await asyncio.to_thread(self.llm_server.stop)

    async def serve_forever(self, ready: asyncio.Event | None = None) -> None:
        """Serve until SIGTERM/SIGINT (or ``stop_event``); then shut down cleanly and return."""
        cfg = self.config
        self.stop_event = self.stop_event or asyncio.Event()
        loop = asyncio.get_running_loop()
        handled = install_stop_signals(loop, self._on_signal)
        runners: list[web.AppRunner] = []
        supervisors: list[asyncio.Task] = []
        receiver: Any = None  # transports.conn_dispatch.ConnectionReceiver with server.balance = least_loaded
        try:
            await self.start_engines()
            if self.llm_server is not None:
                supervisors.append(asyncio.create_task(self.llm_server.supervise(), name="llm-supervisor"))
            for proc in self.engine_procs:
                supervisors.append(asyncio.create_task(proc.supervise(), name=f"{proc.child_label} supervisor"))
            app = self.make_app()
            runner = web.AppRunner(app, shutdown_timeout=cfg.server.shutdown_timeout_s)
            runners.append(runner)
            await runner.setup()
            self.freeze_heap()
            if self.conn_fd is not None:  # the parent accepts; its connections come over this descriptor
                from transports.conn_dispatch import ConnectionReceiver

                server = runner.server
                assert server is not None
                receiver = ConnectionReceiver(self.conn_fd, server, lambda: max(
                    self.gate.active if self.gate else 0, len(server.connections)))
                receiver.start(loop)
            else:
                site = web.TCPSite(runner, cfg.server.host, cfg.server.port, reuse_port=self.worker_index is not None)
                await site.start()
            port = runner.addresses[0][1] if runner.addresses else cfg.server.port
            cfg.server.port = port
            if cfg.server.metrics_listen:
                host, _, mport = cfg.server.metrics_listen.rpartition(":")
                probe = web.AppRunner(self.probe_app(app), shutdown_timeout=1.0)
                runners.append(probe)
                await probe.setup()
                await web.TCPSite(probe, host or "127.0.0.1", int(mport)).start()
                logger.info(f"/metrics, /health and /ready also on http://{cfg.server.metrics_listen}/")
            if self.worker_index is not None:  # the parent says when all its workers are ready
                logger.info(f"worker {self.worker_index} (pid {os.getpid()}) is listening on port {port}")
            else:
                logger.info(f"Cadence is listening: open http://{cfg.server.host}:{port}/ and click Talk")
                print(f"Cadence is ready: open http://{cfg.server.host}:{port}/ in a browser and click Talk",
                      flush=True)
            if ready is not None:
                ready.set()
            if not self.stop_event.is_set():
                await self.stop_event.wait()
            logger.info("shutting down: goodbyes, then closing calls and stopping children")
            await self.say_goodbyes()
        finally:
            for sig in handled:
                loop.remove_signal_handler(sig)
            for task in supervisors:
                task.cancel()
            if receiver is not None:
                receiver.close()
            for runner in reversed(runners):
                try:
                    await asyncio.wait_for(runner.cleanup(), cfg.server.shutdown_timeout_s + 1.0)
                except Exception as exc:  # TimeoutError included: the children are stopped below anyway
                    logger.warning(f"shutdown: {exc!r}")
            self.stop_children()

    def _on_signal(self, sig: signal.Signals) -> None:
        logger.info(f"received {sig.name}")
        if self.stop_event is not None:
            if self.stop_event.is_set():  # a second signal: stop waiting for anything
                raise SystemExit(128 + sig)
            self.stop_event.set()
