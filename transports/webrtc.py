"""WebRTC signalling (SmallWebRTC on aiortc) on an aiohttp server, plus the page a person opens.

``POST /api/offer`` takes ``{"sdp", "type", "pc_id"?}`` and answers with the bot's SDP; each new
peer gets its own pipeline from ``session_factory``. ``PATCH /api/offer`` adds trickled ICE
candidates. A malformed offer is answered with HTTP 400 and a reason; nothing is left behind.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from importlib import resources
from typing import Any, Protocol

from aiohttp import web
from loguru import logger
from pipecat.frames.frames import Frame, InterruptionFrame
from pipecat.processors.frame_processor import FrameDirection
from pipecat.transports.base_transport import TransportParams
from pipecat.transports.smallwebrtc.connection import SmallWebRTCConnection
from pipecat.transports.smallwebrtc.transport import SmallWebRTCTransport

from transports.params import transport_params  # noqa: F401  (re-exported)

# Given a transport for a new caller, run that caller's pipeline until it ends.
SessionFactory = Callable[[SmallWebRTCTransport, str], Awaitable[None]]


class Gate(Protocol):
    """Admission: ``acquire`` returns None to admit (then ``release`` at the end) or a refusal."""

    async def acquire(self) -> Any: ...

    def release(self) -> None: ...


class OfferError(ValueError):
    """A signalling request that cannot be accepted (answered with HTTP 400)."""


def parse_offer(data: Any) -> tuple[str, str, str | None]:
    if not isinstance(data, dict):
        raise OfferError("offer must be a JSON object with 'sdp' and 'type'")
    sdp, kind, pc_id = data.get("sdp"), data.get("type"), data.get("pc_id")
    if kind != "offer":
        raise OfferError(f"'type' must be 'offer', got {kind!r}")
    if not isinstance(sdp, str) or not sdp.startswith("v=0"):
        raise OfferError("'sdp' must be an SDP string starting with 'v=0'")
    if "m=audio" not in sdp:
        raise OfferError("the offer has no audio media section (m=audio)")
    if pc_id is not None and not isinstance(pc_id, str):
        raise OfferError("'pc_id' must be a string")
    return sdp, kind, pc_id


class WebRTCSignalling:
    """Holds live peer connections; one pipeline task per peer."""

    def __init__(self, session_factory: SessionFactory, params: TransportParams,
                 gate: Gate | None = None):
        self._factory = session_factory
        self._params = params
        self._gate = gate
        self.connections: dict[str, SmallWebRTCConnection] = {}
        self.tasks: set[asyncio.Task] = set()

    async def offer(self, request: web.Request) -> web.Response:
        try:
            sdp, kind, pc_id = parse_offer(await request.json())
        except ValueError as exc:  # JSONDecodeError is a ValueError
            return web.json_response({"error": f"malformed offer: {exc}"}, status=400)
        if pc_id and pc_id in self.connections:
            conn = self.connections[pc_id]
            await conn.renegotiate(sdp=sdp, type=kind, restart_pc=False)
            return web.json_response(conn.get_answer())
        if self._gate is not None:
            refusal = await self._gate.acquire()
            if refusal is not None:
                return web.json_response({"error": refusal.reason}, status=refusal.status,
                                         headers={"Retry-After": str(refusal.retry_after_s)})
        conn = SmallWebRTCConnection()
        try:
            await conn.initialize(sdp=sdp, type=kind)
            answer = conn.get_answer()
            if not answer:
                raise OfferError("no SDP answer could be made for this offer")
        except Exception as exc:
            await _quiet_disconnect(conn)
            if self._gate is not None:
                self._gate.release()
            logger.warning(f"rejected WebRTC offer: {exc}")
            return web.json_response({"error": f"malformed offer: {exc}"}, status=400)
        self.connections[conn.pc_id] = conn
        transport = SmallWebRTCTransport(webrtc_connection=conn, params=self._params)
        flush_playout_on_interruption(transport)
        task = asyncio.create_task(self._run(conn, transport), name=f"session-{conn.pc_id}")
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)
        return web.json_response(answer)

    async def _run(self, conn: SmallWebRTCConnection, transport: SmallWebRTCTransport) -> None:
        try:
            await self._factory(transport, conn.pc_id)
        except Exception:
            logger.exception(f"session {conn.pc_id} failed")
        finally:
            self.connections.pop(conn.pc_id, None)
            await _quiet_disconnect(conn)
            if self._gate is not None:
                self._gate.release()

    async def patch(self, request: web.Request) -> web.Response:
        from aiortc.sdp import candidate_from_sdp

        try:
            data = await request.json()
            conn = self.connections.get(data["pc_id"])
            candidates = data.get("candidates") or []
        except (ValueError, KeyError, TypeError) as exc:
            return web.json_response({"error": f"malformed candidate patch: {exc}"}, status=400)
        if conn is None:
            return web.json_response({"error": "peer connection not found"}, status=404)
        for c in candidates:
            cand = None
            if c.get("candidate"):
                cand = candidate_from_sdp(c["candidate"].removeprefix("candidate:"))
                cand.sdpMid = c.get("sdp_mid")
                cand.sdpMLineIndex = c.get("sdp_mline_index")
            await conn.add_ice_candidate(cand)
        return web.json_response({"status": "ok"})

    async def close(self) -> None:
        await asyncio.gather(*(_quiet_disconnect(c) for c in list(self.connections.values())))
        for task in list(self.tasks):
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)


def _drop_queued_playout(output: Any) -> None:
    """Drop audio already handed to the WebRTC track (up to a chunk) and release its writer."""
    track = getattr(getattr(output, "_client", None), "_audio_output_track", None)
    queue = getattr(track, "_chunk_queue", None)
    if not queue:
        return
    while queue:
        _chunk, future = queue.popleft()
        if future is not None and not future.done():
            future.set_result(True)


def flush_playout_on_interruption(transport: SmallWebRTCTransport) -> None:
    """On an interruption, also drop what pipecat already queued in the outgoing track.

    Stock pipecat clears its own output queue but lets the chunk in the track play out: 40-80 ms
    more of the bot talking over the caller.
    """
    output = transport.output()
    original = output.process_frame

    async def process_frame(frame: Frame, direction: FrameDirection) -> None:
        if isinstance(frame, InterruptionFrame):
            _drop_queued_playout(output)
            await original(frame, direction)
            _drop_queued_playout(output)
            return
        await original(frame, direction)

    output.process_frame = process_frame  # type: ignore[method-assign]


async def _quiet_disconnect(conn: SmallWebRTCConnection) -> None:
    try:
        await conn.disconnect()
    except Exception as exc:  # already closed, or never opened
        logger.debug(f"disconnect: {exc}")


async def index(_request: web.Request) -> web.Response:
    html = resources.files("transports").joinpath("static/index.html").read_text()
    return web.Response(text=html, content_type="text/html")


def add_routes(app: web.Application, signalling: WebRTCSignalling) -> None:
    app.router.add_get("/", index)
    app.router.add_post("/api/offer", signalling.offer)
    app.router.add_patch("/api/offer", signalling.patch)
