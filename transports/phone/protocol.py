"""The Twilio Media Streams WebSocket protocol: strict parsing of what the provider sends.

Provider -> us: ``connected``, ``start``, ``media``, ``dtmf``, ``mark``, ``stop`` (JSON text
frames). Us -> provider: ``media``, ``mark``, ``clear``. Anything the provider sends that does not
fit raises ``ProtocolError`` carrying the WebSocket close code and a reason the caller sees:

- 1003 (unsupported data): binary frames, unknown events, a media format other than 8 kHz mu-law.
- 1007 (invalid payload): malformed JSON, fields of the wrong type, bad base64, payload sizes
  out of range.
- 1008 (policy): events out of order (``media`` before ``start``), a foreign ``streamSid``.
"""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass, field
from typing import Any

from transports.json_limits import loads_bounded

CLOSE_NORMAL = 1000
CLOSE_GOING_AWAY = 1001
CLOSE_UNSUPPORTED = 1003
CLOSE_INVALID_PAYLOAD = 1007
CLOSE_POLICY = 1008
CLOSE_INTERNAL = 1011
CLOSE_TRY_AGAIN_LATER = 1013

SAMPLE_RATE = 8000
ENCODING = "audio/x-mulaw"
# Twilio sends 20 ms (160 bytes); other bridges send 10-60 ms. More than this is not a live stream.
MAX_PAYLOAD_BYTES = SAMPLE_RATE // 5  # 200 ms
KNOWN_EVENTS = frozenset({"connected", "start", "media", "dtmf", "mark", "stop"})
MAX_DEPTH = 6  # the deepest provider message (start.mediaFormat / customParameters) is 3


class ProtocolError(ValueError):
    """A message that breaks the protocol; ``code`` is the WebSocket close code to answer with."""

    def __init__(self, code: int, reason: str):
        super().__init__(reason)
        self.code = code
        self.reason = reason

    def close_reason(self) -> bytes:
        """The reason as a close-frame payload (at most 123 bytes of UTF-8)."""
        return self.reason.encode()[:123]


@dataclass(frozen=True)
class StreamStart:
    """What the ``start`` event tells us about the call."""

    stream_sid: str
    call_sid: str = ""
    account_sid: str = ""
    tracks: tuple[str, ...] = ("inbound",)
    custom_parameters: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Message:
    """One parsed provider message. ``payload`` is raw mu-law for ``media``."""

    event: str
    stream_sid: str | None = None
    payload: bytes = b""
    track: str = "inbound"
    digit: str = ""
    mark_name: str = ""
    start: StreamStart | None = None


def _obj(value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ProtocolError(CLOSE_INVALID_PAYLOAD, f"'{where}' must be a JSON object")
    return value


def _str(value: Any, where: str, *, required: bool = True) -> str:
    if value is None and not required:
        return ""
    if not isinstance(value, str) or (required and not value):
        raise ProtocolError(CLOSE_INVALID_PAYLOAD, f"'{where}' must be a non-empty string")
    return value


def _parse_start(msg: dict[str, Any]) -> StreamStart:
    start = _obj(msg.get("start"), "start")
    sid = _str(start.get("streamSid") or msg.get("streamSid"), "start.streamSid")
    fmt = _obj(start.get("mediaFormat", {"encoding": ENCODING, "sampleRate": SAMPLE_RATE, "channels": 1}),
               "start.mediaFormat")
    encoding, rate, channels = fmt.get("encoding"), fmt.get("sampleRate"), fmt.get("channels", 1)
    if encoding != ENCODING or rate != SAMPLE_RATE or channels != 1:
        raise ProtocolError(CLOSE_UNSUPPORTED, f"unsupported mediaFormat {encoding}/{rate}/{channels}: "
                                               f"expected {ENCODING}/{SAMPLE_RATE}/1")
    tracks = start.get("tracks", ["inbound"])
    if not isinstance(tracks, list) or not all(isinstance(t, str) for t in tracks):
        raise ProtocolError(CLOSE_INVALID_PAYLOAD, "'start.tracks' must be a list of strings")
    params = start.get("customParameters") or {}
    if not isinstance(params, dict):
        raise ProtocolError(CLOSE_INVALID_PAYLOAD, "'start.customParameters' must be a JSON object")
    return StreamStart(
        stream_sid=sid,
        call_sid=_str(start.get("callSid"), "start.callSid", required=False),
        account_sid=_str(start.get("accountSid"), "start.accountSid", required=False),
        tracks=tuple(tracks),
        custom_parameters={str(k)[:64]: str(v)[:1024] for k, v in list(params.items())[:32]},
    )


def _parse_payload(media: dict[str, Any], max_bytes: int) -> bytes:
    text = media.get("payload")
    if not isinstance(text, str):
        raise ProtocolError(CLOSE_INVALID_PAYLOAD, "'media.payload' must be a base64 string")
    try:
        payload = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise ProtocolError(CLOSE_INVALID_PAYLOAD, "'media.payload' is not valid base64") from None
    if not 0 < len(payload) <= max_bytes:
        raise ProtocolError(CLOSE_INVALID_PAYLOAD, f"media payload of {len(payload)} bytes: expected "
                                                   f"1..{max_bytes} bytes of 8 kHz mu-law")
    return payload


def parse_message(data: str | bytes, max_payload_bytes: int = MAX_PAYLOAD_BYTES) -> Message:
    """Parse one text frame from the provider; raise ``ProtocolError`` on anything malformed."""
    if isinstance(data, bytes):
        raise ProtocolError(CLOSE_UNSUPPORTED, "binary frames are not part of the protocol: send JSON text")
    try:
        msg = loads_bounded(data, max_depth=MAX_DEPTH)
    except ValueError as exc:  # malformed, or nested too deeply
        raise ProtocolError(CLOSE_INVALID_PAYLOAD, str(exc)) from None
    msg = _obj(msg, "message")
    event = msg.get("event")
    if not isinstance(event, str):
        raise ProtocolError(CLOSE_INVALID_PAYLOAD, "message has no 'event' string")
    if event not in KNOWN_EVENTS:
        raise ProtocolError(CLOSE_UNSUPPORTED, f"unknown event {event[:40]!r}")
    sid = msg.get("streamSid")
    if sid is not None and not isinstance(sid, str):
        raise ProtocolError(CLOSE_INVALID_PAYLOAD, "'streamSid' must be a string")
    if event == "media":
        media = _obj(msg.get("media"), "media")
        track = media.get("track", "inbound")
        return Message(event, sid, payload=_parse_payload(media, max_payload_bytes),
                       track=track if isinstance(track, str) else "inbound")
    if event == "start":
        start = _parse_start(msg)
        return Message(event, sid or start.stream_sid, start=start)
    if event == "dtmf":
        digit = _str(_obj(msg.get("dtmf"), "dtmf").get("digit"), "dtmf.digit")
        return Message(event, sid, digit=digit)
    if event == "mark":
        return Message(event, sid, mark_name=_str(_obj(msg.get("mark"), "mark").get("name"), "mark.name"))
    return Message(event, sid)


def mark_message(stream_sid: str, name: str) -> str:
    return json.dumps({"event": "mark", "streamSid": stream_sid, "mark": {"name": name}})

