"""The aiohttp side of phone calls: ``GET /phone/ws`` (the media stream), ``/phone/twiml``, ``/phone/calls``.

One call: Twilio signature (when ``twilio_auth_token`` is set) and a ``?token=`` given in the URL
checked before the upgrade (403/401) -> upgrade -> ``connected`` and ``start`` within
``handshake_timeout_s`` (else a protocol close) -> credentials (query or ``token`` custom
parameter: the phone token or the server's API key; 1008 if wrong) -> admission gate (refused:
close 1013 with the reason) -> a ``PhoneTransport`` and a fresh pipeline until the call ends ->
gate released, call moved to the recent list. A caller without credentials never holds a slot.
Nothing of a call outlives its handler: every exit path goes through one ``finally``.
"""

from __future__ import annotations

import asyncio
import hmac
import time
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol
from xml.sax.saxutils import quoteattr

from aiohttp import WSMsgType, web
from loguru import logger

from transports.phone import twilio_signature
from transports.phone.barge_in import BargeInDetector
from transports.phone.options import PhoneOptions
from transports.phone.protocol import (
    CLOSE_GOING_AWAY,
    CLOSE_INTERNAL,
    CLOSE_NORMAL,
    CLOSE_POLICY,
    CLOSE_TRY_AGAIN_LATER,
    ProtocolError,
    StreamStart,
    parse_message,
)
from transports.phone.socket import PhoneSocket
from transports.phone.stats import PHONE_STATS, CallStats
from transports.phone.transport import PhoneTransport

# Run one caller's pipeline on the transport until it ends: (transport, session_id, observers).
RunCall = Callable[[PhoneTransport, str, Sequence[Any]], Awaitable[None]]


class Gate(Protocol):
    async def acquire(self) -> Any: ...

    def release(self) -> None: ...


@dataclass
class CallRecord:
    start: StreamStart
    stats: CallStats
    started_at: float = field(default_factory=time.time)
    ended_at: float | None = None
    close_code: int | None = None
    close_reason: str = ""
    closed_by_peer: bool = False
    turns: list[dict[str, Any]] = field(default_factory=list)
    replies: list[Any] = field(default_factory=list)

    def add_turn(self, timing: Any) -> None:
        self.turns.append({"transcript": timing.transcript_text, "reply": timing.reply_text.strip(),
                           "interrupted": timing.interrupted,
                           "stages_ms": {k: round(v, 1) for k, v in timing.stages_ms().items()}})

    def as_dict(self, transcripts: bool = True) -> dict[str, Any]:
        turns = self.turns if transcripts else [{k: v for k, v in t.items() if k not in ("transcript", "reply")}
                                                for t in self.turns]
        return {"stream_sid": self.start.stream_sid, "call_sid": self.start.call_sid,
                "started_at": self.started_at, "ended_at": self.ended_at, "close_code": self.close_code,
                "close_reason": self.close_reason, "closed_by_peer": self.closed_by_peer,
                "stats": self.stats.as_dict(), "replies": [r.as_dict() for r in self.replies], "turns": turns}


async def read_start(socket: PhoneSocket, timeout_s: float, max_payload_bytes: int) -> StreamStart | None:
    """Wait for ``start`` (after an optional ``connected``); None if the peer went away first."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            msg = await socket.receive(max(0.0, deadline - time.monotonic()))
        except TimeoutError:
            raise ProtocolError(CLOSE_POLICY, f"no 'start' event within {timeout_s:g} s") from None
        if msg.type in (WSMsgType.CLOSE, WSMsgType.CLOSING, WSMsgType.CLOSED, WSMsgType.ERROR):
            socket.peer_closed(socket.ws.close_code)
            return None
        message = parse_message(msg.data, max_payload_bytes)
        if message.event == "start":
            assert message.start is not None
            return message.start
        if message.event != "connected":
            raise ProtocolError(CLOSE_POLICY, f"'{message.event}' before 'start'")


class PhoneEndpoint:
    def __init__(self, run_call: RunCall, *, gate: Gate | None = None, in_sample_rate: int = 16000,
                 options: PhoneOptions | None = None,
                 barge_in_factory: Callable[[], BargeInDetector | None] | None = None,
                 observer_factory: Callable[[CallRecord], Sequence[Any]] | None = None, api_key: str = ""):
        self._run_call = run_call
        self.api_key = api_key
        self.gate = gate
        self.in_sample_rate = in_sample_rate
        self.options = options or PhoneOptions()
        self._barge_in_factory = barge_in_factory or (lambda: None)
        self._observer_factory = observer_factory or (lambda _record: ())
        self.active: dict[str, tuple[CallRecord, PhoneSocket]] = {}
        self.recent: deque[CallRecord] = deque(maxlen=self.options.recent_calls)

    def add_routes(self, app: web.Application) -> None:
        app.router.add_get(self.options.path, self.websocket)
        app.router.add_route("*", "/phone/twiml", self.twiml)
        app.router.add_get("/phone/calls", self.calls)
        app.router.add_get("/phone/calls/{sid}", self.call)
        app.on_shutdown.append(self.close_all)

    def _tokens(self) -> list[str]:
        return [t for t in (self.options.token, self.api_key) if t]

    def _token_ok(self, offered: str) -> bool:
        tokens = self._tokens()
        if not tokens:
            return True
        got = offered.encode("utf-8", "surrogatepass")  # a lone surrogate is just a wrong token
        return any(hmac.compare_digest(got, t.encode("utf-8", "surrogatepass")) for t in tokens)

    async def websocket(self, request: web.Request) -> web.StreamResponse:
        signed = False
        if self.options.twilio_auth_token:
            if not await twilio_signature.check(request, self.options.twilio_auth_token,
                                                self.options.trust_forwarded_headers):
                logger.warning("phone: refused a handshake without a valid X-Twilio-Signature")
                return web.json_response({"error": "invalid or missing X-Twilio-Signature"}, status=403)
            signed = True
        query_token = request.query.get("token", "")
        if query_token and not self._token_ok(query_token):
            return web.json_response({"error": "unauthorized: wrong token"}, status=401)
        ws = web.WebSocketResponse(max_msg_size=self.options.max_frame_bytes)
        await ws.prepare(request)
        socket = PhoneSocket(ws, "phone (handshake)")
        try:
            start = await self._handshake(socket, query_token, signed)
            if start is None:
                return ws
            if self.gate is not None:
                refusal = await self.gate.acquire()
                if refusal is not None:
                    PHONE_STATS.refused_total += 1
                    logger.warning(f"phone: refused a call: {refusal.reason}")
                    await socket.close(CLOSE_TRY_AGAIN_LATER,
                                       f"refused: {refusal.reason}; retry after {refusal.retry_after_s} s")
                    return ws
            try:
                await self._call(socket, start)
            finally:
                await socket.close(CLOSE_NORMAL, "call ended")
                if self.gate is not None:
                    self.gate.release()
        except Exception as exc:  # nothing may escape as a traceback with a normal close
            logger.exception("phone: the call handler failed")
            await socket.close(CLOSE_INTERNAL, f"internal error: {type(exc).__name__}")
        finally:
            await socket.close(CLOSE_NORMAL, "call ended")
        return ws

    async def _handshake(self, socket: PhoneSocket, query_token: str, signed: bool) -> StreamStart | None:
        """``connected``/``start`` and the caller's credentials; None (socket closed) if it fails."""
        try:
            start = await read_start(socket, self.options.handshake_timeout_s, self.options.max_payload_bytes)
        except ProtocolError as exc:
            PHONE_STATS.protocol_error(exc.code)
            logger.warning(f"phone: handshake failed ({exc.code}): {exc.reason}")
            await socket.close(exc.code, exc.reason)
            return None
        if start is None:
            return None
        offered = query_token or start.custom_parameters.get("token", "")
        if not signed and not self._token_ok(offered):
            PHONE_STATS.protocol_error(CLOSE_POLICY)
            logger.warning(f"phone {start.stream_sid!r}: refused: missing or wrong token")
            await socket.close(CLOSE_POLICY, "unauthorized: missing or wrong token")
            return None
        if start.stream_sid in self.active:
            await socket.close(CLOSE_POLICY, "this stream is already connected")
            return None
        return start

    async def _call(self, socket: PhoneSocket, start: StreamStart) -> None:
        sid = start.stream_sid
        if sid in self.active:  # connected while this one waited for admission
            await socket.close(CLOSE_POLICY, "this stream is already connected")
            return
        socket.label = f"phone {sid}"
        transport = PhoneTransport(socket.ws, start, in_sample_rate=self.in_sample_rate, options=self.options,
                                   barge_in=self._barge_in_factory(), socket=socket)
        record = CallRecord(start, transport.stats, replies=transport.output().ledger.replies)
        self.active[sid] = (record, socket)
        PHONE_STATS.calls_total += 1
        logger.info(f"phone {sid}: call {start.call_sid or '-'} connected")
        try:
            await self._run_call(transport, f"phone-{sid}", list(self._observer_factory(record)))
        except Exception as exc:
            logger.exception(f"phone {sid}: the call failed")
            await socket.close(CLOSE_INTERNAL, f"internal error: {type(exc).__name__}")
        finally:
            await socket.close(CLOSE_NORMAL, "call ended")
            self.active.pop(sid, None)
            record.ended_at = time.time()
            record.close_code, record.close_reason = socket.close_code, socket.close_reason
            record.closed_by_peer = socket.closed_by_peer
            self.recent.append(record)
            logger.info(f"phone {sid}: ended ({record.close_code} {record.close_reason})")

    async def calls(self, _request: web.Request) -> web.Response:
        show = self.options.expose_transcripts
        return web.json_response({
            "active": [record.as_dict(show) for record, _ in self.active.values()],
            "recent": [record.as_dict(show) for record in self.recent],
            "totals": PHONE_STATS.snapshot(),
        })

    async def call(self, request: web.Request) -> web.Response:
        sid = request.match_info["sid"]
        record = self.active[sid][0] if sid in self.active else next(
            (r for r in reversed(self.recent) if r.start.stream_sid == sid), None)
        if record is None:
            return web.json_response({"error": f"no call with stream {sid!r}"}, status=404)
        return web.json_response({**record.as_dict(self.options.expose_transcripts), "active": sid in self.active})

    async def twiml(self, request: web.Request) -> web.Response:
        """TwiML for the provider's voice webhook: connect the call to our media stream.

        With a phone token or API key set, it is served only to requests signed by Twilio (it then
        carries the token as a ``<Parameter>``); without a Twilio auth token it is disabled.
        """
        token = self.options.token or self.api_key
        if self.options.twilio_auth_token:
            if not await twilio_signature.check(request, self.options.twilio_auth_token,
                                                self.options.trust_forwarded_headers):
                return web.json_response({"error": "invalid or missing X-Twilio-Signature"}, status=403)
        elif token:
            return web.json_response({"error": "disabled while a phone token or API key is set and no "
                                               "phone.twilio_auth_token: put the TwiML with its "
                                               "<Parameter name=\"token\"> in a TwiML Bin"}, status=404)
        host, secure = twilio_signature.public_host(request, self.options.trust_forwarded_headers)
        url = f"{'wss' if secure else 'ws'}://{host}{self.options.path}"
        stream = (f"<Stream url={quoteattr(url)}><Parameter name=\"token\" value={quoteattr(token)} /></Stream>"
                  if token else f"<Stream url={quoteattr(url)} />")
        body = ('<?xml version="1.0" encoding="UTF-8"?>\n'
                f"<Response><Connect>{stream}</Connect></Response>\n")
        return web.Response(text=body, content_type="application/xml")

    async def close_all(self, _app: web.Application | None = None) -> None:
        """Server shutdown: close every live call (their handlers then clean up)."""
        await asyncio.gather(*(socket.close(CLOSE_GOING_AWAY, "server shutting down")
                               for _, socket in list(self.active.values())))
