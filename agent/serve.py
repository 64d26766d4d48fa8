"""``cadence serve``: the HTTP server with the WebRTC page, signalling, health and readiness.

Start-up order: LLM server (if Cadence owns it) -> engines loaded and warmed -> GC frozen ->
listening. Every caller gets a fresh pipeline on the shared engines, behind the admission gate.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from loguru import logger

from agent.admission import AdmissionGate
from agent.config import Config
from agent.llm_server import ManagedLLMServer, embedded_llama_server
from agent.pipeline import Engines
from agent.runtime import freeze_gc_heap
from agent.session import run_session
from agent.turn_observer import TurnObserver
from transports.webrtc import WebRTCSignalling, add_routes, transport_params

# Extensions (metrics, phone transport, ...) register routes and observers through hooks.
RouteHook = Callable[[web.Application, "CadenceServer"], None]


@dataclass
class CadenceServer:
    config: Config
    engines: Engines | None = None
    llm_server: ManagedLLMServer | None = None
    gate: AdmissionGate | None = None
    signalling: WebRTCSignalling | None = None
    observer_factories: list[Callable[[str], Any]] = field(default_factory=list)
    route_hooks: list[RouteHook] = field(default_factory=list)
    sessions: dict[str, TurnObserver] = field(default_factory=dict)
    max_session_records: int = 200

    async def start_engines(self) -> None:
        """GPU memory plan (refuse to start if it cannot fit) -> LLM server -> engines -> GC freeze."""
        from agent.gpu_memory import (
            apply_in_process_fraction,
            check_llm_server,
            managed_vllm_server,
            plan_for,
        )

        cfg = self.config
        plan = plan_for(cfg)  # None unless the config gives GPU shares; raises GPUPlanError
        if plan is not None:
            logger.info(f"GPU memory plan:\n{plan.summary()}")
        base_url, model = cfg.llm.base_url, cfg.llm.model
        if not base_url and plan is not None and cfg.gpu.vllm_model:
            self.llm_server = managed_vllm_server(plan, cfg)
            await self.llm_server.astart()
            base_url, model = self.llm_server.base_url, self.llm_server.model_id or cfg.gpu.vllm_model
            await asyncio.to_thread(check_llm_server, base_url, model)
        elif not base_url:
            self.llm_server = embedded_llama_server(cfg.llm.threads, cfg.llm.context_size, cfg.llm.model,
                                                    cfg.llm.server_start_timeout_s)
            await self.llm_server.astart()
            base_url, model = self.llm_server.base_url, self.llm_server.model_id
        if plan is not None:
            apply_in_process_fraction(plan)
        try:
            self.engines = await asyncio.to_thread(Engines.load, cfg, base_url, model)
        except BaseException:
            if self.llm_server is not None:
                self.llm_server.stop()
            raise
        if cfg.runtime.gc_freeze:
            freeze_gc_heap()

    def observers_for(self, session_id: str) -> list[Any]:
        return [factory(session_id) for factory in self.observer_factories]

    async def run_caller(self, transport: Any, session_id: str, pre_stages: tuple = (),
                         observers: tuple = (), audio_out_sample_rate: int | None = None) -> None:
        assert self.engines is not None
        turns = TurnObserver()
        self.sessions[session_id] = turns
        while len(self.sessions) > self.max_session_records:
            oldest = next(iter(self.sessions))
            if oldest == session_id:
                break
            self.sessions.pop(oldest)
        await run_session(self.engines, transport, session_id,
                          observers=[turns, *self.observers_for(session_id), *observers], pre_stages=pre_stages,
                          audio_out_sample_rate=audio_out_sample_rate)

    async def session_info(self, request: web.Request) -> web.Response:
        """Recent turns of one session: transcripts, replies and stage latencies."""
        turns = self.sessions.get(request.match_info["session_id"])
        if turns is None:
            return web.json_response({"error": "no such session"}, status=404)
        return web.json_response({"turns": [
            {"transcript": t.transcript_text, "reply": t.reply_text.strip(), "interrupted": t.interrupted,
             "latency_ms": {k: round(v, 1) for k, v in t.stages_ms().items()}}
            for t in turns.turns[-100:]
        ]})

    def make_app(self) -> web.Application:
        cfg = self.config
        self.gate = self.gate or AdmissionGate(cfg.admission)
        self.signalling = WebRTCSignalling(
            self.run_caller, transport_params(cfg.audio.in_sample_rate, cfg.audio.out_sample_rate), self.gate
        )
        app = web.Application(client_max_size=256 * 1024)
        add_routes(app, self.signalling)
        app.router.add_get("/health", self.health)
        app.router.add_get("/ready", self.ready)
        app.router.add_get("/api/sessions/{session_id}", self.session_info)
        for hook in self.route_hooks:
            hook(app, self)
        app.on_cleanup.append(self._cleanup)
        return app

    async def health(self, _request: web.Request) -> web.Response:
        return web.json_response({"status": "ok", "sessions": self.gate.active if self.gate else 0})

    async def ready(self, _request: web.Request) -> web.Response:
        assert self.gate is not None
        ok, reason = self.gate.ready()
        body = {"ready": ok, "reason": reason, "active": self.gate.active, "capacity": self.gate.capacity}
        return web.json_response(body, status=200 if ok else 503)

    async def _cleanup(self, _app: web.Application) -> None:
        if self.signalling is not None:
            await self.signalling.close()
        if self.llm_server is not None:
            self.llm_server.stop()

    async def serve_forever(self, ready: asyncio.Event | None = None) -> None:
        await self.start_engines()
        app = self.make_app()
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, self.config.server.host, self.config.server.port)
        await site.start()
        port = runner.addresses[0][1] if runner.addresses else self.config.server.port
        self.config.server.port = port
        logger.info(f"Cadence is listening: open http://{self.config.server.host}:{port}/ and click Talk")
        print(f"Cadence is ready: open http://{self.config.server.host}:{port}/ in a browser and click Talk",
              flush=True)
        if ready is not None:
            ready.set()
        try:
            await asyncio.Event().wait()
        finally:
            with contextlib.suppress(Exception):
                await runner.cleanup()
