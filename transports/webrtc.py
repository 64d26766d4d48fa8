"""WebRTC signalling (SmallWebRTC on aiortc) on an aiohttp server, plus the page a person opens.

``POST /api/offer`` takes ``{"sdp", "type", "pc_id"?}`` (``application/json``) and answers with the
bot's SDP; each new peer gets its own pipeline from ``session_factory``. ``PATCH /api/offer`` adds
trickled ICE candidates. A malformed offer (bad JSON, nested too deeply, SDP that fails
``sdp_check``) is answered with HTTP 400 and a reason before any admission slot is taken.

Every admitted peer gives its slot back on every path, in bounded time: a peer that has not
completed ICE within ``connect_timeout_s`` is closed (its session then ends), and closing a
connection is bounded by ``DISCONNECT_TIMEOUT_S`` (aiortc's ``close`` can wait forever on a
connection its own connecting-timeout already half-closed).
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

from transports.jitter import check_prefetch, set_audio_prefetch
from transports.json_limits import loads_bounded
from transports.params import transport_params  # noqa: F401  (re-exported)
from transports.sdp_check import SDPError, check_offer_sdp
from transports.webrtc_peers import PeerRouter

# Given a transport for a new caller, run that caller's pipeline until it ends.
SessionFactory = Callable[[SmallWebRTCTransport, str], Awaitable[None]]

MAX_OFFER_BYTES = 128 * 1024
MAX_CANDIDATES = 64
DISCONNECT_TIMEOUT_S = 3.0
# After the connection is closed, the session has this long to end by itself before it is cancelled.
SESSION_END_GRACE_S = 5.0


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
    if pc_id is not None and (not isinstance(pc_id, str) or len(pc_id) > 200):
        raise OfferError("'pc_id' must be a string")
    try:
        check_offer_sdp(sdp)
    except SDPError as exc:
        raise OfferError(str(exc)) from None
    return sdp, kind, pc_id


def parse_candidates(data: Any) -> tuple[str, list[dict[str, Any]]]:
    """``{"pc_id", "candidates": [{"candidate", "sdp_mid", "sdp_mline_index"}]}`` of a PATCH."""
    if not isinstance(data, dict) or not isinstance(data.get("pc_id"), str):
        raise OfferError("a candidate patch is a JSON object with a 'pc_id' string")
    candidates = data.get("candidates") or []
    if not isinstance(candidates, list) or len(candidates) > MAX_CANDIDATES:
        raise OfferError(f"'candidates' must be a list of at most {MAX_CANDIDATES} objects")
    for c in candidates:
        if not isinstance(c, dict) or not isinstance(c.get("candidate", ""), (str, type(None))):
            raise OfferError("each candidate must be an object with a 'candidate' string")
        mid, index = c.get("sdp_mid"), c.get("sdp_mline_index")
        if (mid is not None and not isinstance(mid, str)) or (
                index is not None and (not isinstance(index, int) or isinstance(index, bool))):
            raise OfferError("'sdp_mid' must be a string and 'sdp_mline_index' an integer")
    return data["pc_id"], candidates


async def read_json(request: web.Request) -> Any:
    """The request body as JSON (``application/json``, size and depth bounded); ``OfferError`` else."""
    if request.content_type != "application/json":
        raise web.HTTPUnsupportedMediaType(text='{"error": "send the offer as application/json"}',
                                           content_type="application/json")
    body = await request.read()
    try:
        return loads_bounded(body, max_bytes=MAX_OFFER_BYTES)
    except ValueError as exc:
        raise OfferError(str(exc)) from None


class WebRTCSignalling:
    """Holds live peer connections; one pipeline task per peer."""

    def __init__(self, session_factory: SessionFactory, params: TransportParams,
                 gate: Gate | None = None, connect_timeout_s: float = 20.0, jitter_frames: int = 1,
                 router: PeerRouter | None = None):
        """``router``: in a worker of ``cadence serve --workers N``, names this worker's peers and passes requests
        for another worker's peers on to it (transports/webrtc_peers.py)."""
        self._factory = session_factory
        self.router = router
        self._params = params
        self._gate = gate
        self.connect_timeout_s = connect_timeout_s
        self.jitter_frames = check_prefetch(jitter_frames)  # transports/jitter.py (aiortc's default: 4)
        self.connections: dict[str, SmallWebRTCConnection] = {}
        self.tasks: set[asyncio.Task] = set()

    async def offer(self, request: web.Request) -> web.Response:
        try:
            sdp, kind, pc_id = parse_offer(await read_json(request))
        except ValueError as exc:  # OfferError
            return web.json_response({"error": f"malformed offer: {exc}"}, status=400)
        if pc_id and pc_id not in self.connections and self.router is not None:
            owner = self.router.owner(pc_id)
            if owner is not None:  # a renegotiation of another worker's peer
                return await self.router.forward("POST", owner, {"sdp": sdp, "type": kind, "pc_id": pc_id})
        if pc_id and pc_id in self.connections:
            conn = self.connections[pc_id]
            try:
                await asyncio.wait_for(conn.renegotiate(sdp=sdp, type=kind, restart_pc=False), 10.0)
            except Exception as exc:  # aiortc rejects what the SDP check let through
                logger.warning(f"rejected a renegotiation of {pc_id}: {exc!r}")
                return web.json_response({"error": f"renegotiation failed: {type(exc).__name__}"}, status=400)
            return web.json_response(conn.get_answer())
        if self._gate is not None:
            refusal = await self._gate.acquire()
            if refusal is not None:
                return web.json_response({"error": refusal.reason}, status=refusal.status,
                                         headers={"Retry-After": str(refusal.retry_after_s)})
        conn = SmallWebRTCConnection(connection_timeout_secs=max(1, int(self.connect_timeout_s)))
        if self.router is not None:  # pipecat 1.14 names the peer in its constructor; its answer reads the name
            conn._pc_id = self.router.name(conn.pc_id)
        try:
            await conn.initialize(sdp=sdp, type=kind)
            set_audio_prefetch(conn.pc, self.jitter_frames)
            answer = conn.get_answer()
            if not answer:
                raise OfferError("no SDP answer could be made for this offer")
        except Exception as exc:
            try:
                await _quiet_disconnect(conn)
            finally:
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
        """Run the peer's session; whatever happens, close the peer and give the slot back."""
        session = asyncio.create_task(self._factory(transport, conn.pc_id), name=f"pipeline-{conn.pc_id}")
        guard = asyncio.create_task(self._connect_guard(conn, session), name=f"connect-guard-{conn.pc_id}")
        try:
            await session
        except asyncio.CancelledError:
            if not session.cancelled():
                session.cancel()
            raise
        except Exception:
            logger.exception(f"session {conn.pc_id} failed")
        finally:
            guard.cancel()
            self.connections.pop(conn.pc_id, None)
            try:
                await _quiet_disconnect(conn)
            finally:
                if self._gate is not None:
                    self._gate.release()

    async def _connect_guard(self, conn: SmallWebRTCConnection, session: asyncio.Task) -> None:
        """End a session whose peer has not connected within ``connect_timeout_s``."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.connect_timeout_s
        while loop.time() < deadline:
            state = conn.pc.connectionState
            if state == "connected":
                return
            if state in ("failed", "closed"):
                break
            await asyncio.sleep(0.1)
        logger.warning(f"session {conn.pc_id}: no connection within {self.connect_timeout_s:g} s "
                       f"(state {conn.pc.connectionState}); ending it")
        await _quiet_disconnect(conn)  # the transport sees 'closed' and ends the session
        done, _ = await asyncio.wait({session}, timeout=SESSION_END_GRACE_S)
        if not done:
            logger.warning(f"session {conn.pc_id}: did not end after its peer was closed; cancelling it")
            session.cancel()

    async def patch(self, request: web.Request) -> web.Response:
        from aiortc.sdp import candidate_from_sdp

        try:
            pc_id, candidates = parse_candidates(await read_json(request))
        except ValueError as exc:
            return web.json_response({"error": f"malformed candidate patch: {exc}"}, status=400)
        conn = self.connections.get(pc_id)
        owner = self.router.owner(pc_id) if conn is None and self.router is not None else None
        if owner is not None:  # another worker's peer
            assert self.router is not None
            return await self.router.forward("PATCH", owner, {"pc_id": pc_id, "candidates": candidates})
        if conn is None:
            return web.json_response({"error": "peer connection not found"}, status=404)
        for c in candidates:
            cand = None
            if c.get("candidate"):
                try:
                    cand = candidate_from_sdp(c["candidate"].removeprefix("candidate:"))
                except Exception as exc:  # aiortc asserts on a short line, raises ValueError on others
                    return web.json_response({"error": f"malformed candidate: {exc}"}, status=400)
                cand.sdpMid = c.get("sdp_mid")
                cand.sdpMLineIndex = c.get("sdp_mline_index")
            try:
                await conn.add_ice_candidate(cand)
            except Exception as exc:  # aiortc refuses a candidate for an unknown media section
                return web.json_response({"error": f"candidate refused: {exc}"}, status=400)
        return web.json_response({"status": "ok"})

    async def close(self, timeout_s: float = 5.0) -> None:
        """Server shutdown: close every peer and end every session, in bounded time."""
        await asyncio.gather(*(_quiet_disconnect(c) for c in list(self.connections.values())))
        if self.router is not None:
            await self.router.close()
        for task in list(self.tasks):
            task.cancel()
        if self.tasks:
            await asyncio.wait(set(self.tasks), timeout=timeout_s)


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


async def _quiet_disconnect(conn: SmallWebRTCConnection, timeout_s: float = DISCONNECT_TIMEOUT_S) -> None:
    """Close the peer; never raises, never waits longer than ``timeout_s``."""
    try:
        await asyncio.wait_for(conn.disconnect(), timeout_s)
    except TimeoutError:
        logger.warning(f"disconnect of {conn.pc_id} took over {timeout_s:g} s; abandoned")
    except Exception as exc:  # already closed, or never opened
        logger.debug(f"disconnect: {exc}")


async def index(_request: web.Request) -> web.Response:
    html = resources.files("transports").joinpath("static/index.html").read_text()
    return web.Response(text=html, content_type="text/html")


def add_routes(app: web.Application, signalling: WebRTCSignalling) -> None:
    app.router.add_get("/", index)
    app.router.add_post("/api/offer", signalling.offer)
    app.router.add_patch("/api/offer", signalling.patch)
