"""Stock pipecat 1.14 behind its own SmallWebRTC transport: the peer ``bench/webrtc_latency.py`` calls.

One stock pipeline per peer (``bench/stock_pipecat.py``: Whisper tiny.en int8, the given
OpenAI-compatible LLM server, Piper joe-medium; services built per connection, as pipecat's examples
do), on ``SmallWebRTCConnection`` + ``SmallWebRTCTransport`` with default ``TransportParams``
(audio in and out). ICE host candidates are restricted to loopback (the benchmark's harness, not
pipecat's code). ``POST /api/offer`` answers an offer; ``GET /api/sessions/{pc_id}`` gives that
peer's turns as Cadence's endpoint does (transcript, reply, LLM responses, event times), measured
by the same frame observer (``agent.turn_observer``), which changes nothing in the pipeline.

    python bench/stock_webrtc_server.py --llm-url http://127.0.0.1:PORT/v1 --llm-model MODEL
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from aiohttp import web  # noqa: E402
from loguru import logger  # noqa: E402

from agent.config import load_config  # noqa: E402
from agent.turn_observer import TurnObserver  # noqa: E402
from bench.stock_pipecat import stock_services, stock_worker  # noqa: E402
from transports.ice import LOOPBACK, restrict_ice_hosts  # noqa: E402


class StockServer:
    def __init__(self, llm_url: str, llm_model: str) -> None:
        self.llm_url, self.llm_model = llm_url, llm_model
        self.config = load_config(None)
        self.sessions: dict[str, TurnObserver] = {}
        self.tasks: set[asyncio.Task] = set()

    async def offer(self, request: web.Request) -> web.Response:
        from pipecat.transports.base_transport import TransportParams
        from pipecat.transports.smallwebrtc.connection import SmallWebRTCConnection
        from pipecat.transports.smallwebrtc.transport import SmallWebRTCTransport
        from pipecat.workers.runner import WorkerRunner

        body = await request.json()
        llm = self.config.llm
        services = await asyncio.to_thread(stock_services, self.llm_url, self.llm_model, llm.system_prompt,
                                           llm.max_tokens, llm.temperature)
        conn = SmallWebRTCConnection()
        await conn.initialize(sdp=body["sdp"], type=body["type"])
        transport = SmallWebRTCTransport(webrtc_connection=conn,
                                         params=TransportParams(audio_in_enabled=True, audio_out_enabled=True))
        turns = TurnObserver()
        self.sessions[conn.pc_id] = turns
        audio = self.config.audio
        worker = stock_worker(transport, services, observers=[turns], in_rate=audio.in_sample_rate,
                              out_rate=audio.out_sample_rate)

        @transport.event_handler("on_client_disconnected")
        async def _gone(_transport: Any, _client: Any = None) -> None:
            await worker.cancel()

        async def run() -> None:
            try:
                runner = WorkerRunner(handle_sigint=False)
                await runner.add_workers(worker)
                await runner.run()
            finally:
                await conn.disconnect()

        task = asyncio.create_task(run())
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)
        return web.json_response(conn.get_answer())

    async def session(self, request: web.Request) -> web.Response:
        turns = self.sessions.get(request.match_info["pc_id"])
        if turns is None:
            return web.json_response({"error": "no such session"}, status=404)
        return web.json_response({"turns": [
            {"transcript": t.transcript_text, "reply": t.reply_text.strip(), "interrupted": t.interrupted,
             "latency_ms": {k: round(v, 1) for k, v in t.stages_ms().items()},
             "llm_requests": t.llm_requests, "at": t.event_times()} for t in turns.turns]})

    async def health(self, _request: web.Request) -> web.Response:
        return web.json_response({"status": "ok", "pid": os.getpid(), "sessions": len(self.tasks)})


async def main(args: argparse.Namespace) -> None:
    restrict_ice_hosts(LOOPBACK)
    server = StockServer(args.llm_url, args.llm_model)
    await asyncio.to_thread(stock_services, args.llm_url, args.llm_model, "warm", 1, 0.0)  # imports, caches
    app = web.Application()
    app.router.add_post("/api/offer", server.offer)
    app.router.add_get("/api/sessions/{pc_id}", server.session)
    app.router.add_get("/health", server.health)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", args.port)
    await site.start()
    port = runner.addresses[0][1]
    print(f"stock pipecat is ready: http://127.0.0.1:{port}/", flush=True)
    try:
        await asyncio.Event().wait()
    finally:
        for task in list(server.tasks):
            task.cancel()
        await runner.cleanup()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--llm-url", required=True)
    parser.add_argument("--llm-model", required=True)
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--log-level", default="WARNING")
    cli = parser.parse_args()
    logger.remove()
    logger.add(sys.stderr, level=cli.log_level)
    asyncio.run(main(cli))
