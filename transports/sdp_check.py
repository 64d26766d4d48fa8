"""Strict checks of a WebRTC SDP offer before any session (or admission slot) is spent on it.

aiortc answers many broken offers (truncated in the middle, without ICE credentials or a DTLS
fingerprint) with a 200 and a session that can never connect. ``check_offer_sdp`` rejects them:
the text must be well-formed SDP lines, carry at most ``MAX_MEDIA`` media sections, one of them
an active ``m=audio`` RTP section offering a codec we speak (Opus, PCMU, PCMA), and that section
must have ICE credentials (``ice-ufrag``/``ice-pwd``) and a complete DTLS fingerprint, at media
or session level.
"""

from __future__ import annotations

import re

MAX_SDP_BYTES = 64 * 1024
MAX_MEDIA = 8
MAX_LINES = 2000
FINGERPRINT_BYTES = {"sha-1": 20, "sha-224": 28, "sha-256": 32, "sha-384": 48, "sha-512": 64}
CODECS = {"opus", "pcmu", "pcma"}
STATIC_PAYLOADS = {"0": "pcmu", "8": "pcma"}
_LINE = re.compile(r"^[a-z]=[\x20-\x7e\t]*$")
_MEDIA = re.compile(r"^m=(\w+) (\d+)(?:/\d+)? ([A-Za-z0-9/_.-]+)((?: [A-Za-z0-9_.-]+)+)$")
_ICE_CHAR = re.compile(r"^[A-Za-z0-9+/]+$")
_HEX_PAIRS = re.compile(r"^[0-9A-Fa-f]{2}(?::[0-9A-Fa-f]{2})*$")
_RTPMAP = re.compile(r"^a=rtpmap:(\d+) ([A-Za-z0-9_.-]+)/\d+(?:/\d+)?$")


class SDPError(ValueError):
    """The SDP text cannot be a usable offer; the message says why."""


def _attrs(lines: list[str]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for line in lines:
        if line.startswith("a="):
            name, _, value = line[2:].partition(":")
            out.setdefault(name, []).append(value)
    return out


def _one(session: dict[str, list[str]], media: dict[str, list[str]], name: str) -> list[str]:
    return media.get(name) or session.get(name) or []


def _check_fingerprints(values: list[str]) -> None:
    if not values:
        raise SDPError("the audio section has no DTLS fingerprint (a=fingerprint)")
    for value in values:
        func, _, digest = value.strip().partition(" ")
        want = FINGERPRINT_BYTES.get(func.lower())
        if want is None:
            raise SDPError(f"unknown fingerprint hash {func[:16]!r}")
        if not _HEX_PAIRS.match(digest) or (len(digest) + 1) // 3 != want:
            raise SDPError(f"incomplete {func} fingerprint")


def _check_ice(ufrags: list[str], pwds: list[str]) -> None:
    if not ufrags or not pwds:
        raise SDPError("the audio section has no ICE credentials (a=ice-ufrag / a=ice-pwd)")
    ufrag, pwd = ufrags[0], pwds[0]
    if not 4 <= len(ufrag) <= 256 or not _ICE_CHAR.match(ufrag):
        raise SDPError("a=ice-ufrag must be 4-256 ICE characters")
    if not 22 <= len(pwd) <= 256 or not _ICE_CHAR.match(pwd):
        raise SDPError("a=ice-pwd must be 22-256 ICE characters")


def _has_codec(formats: list[str], attrs: dict[str, list[str]]) -> bool:
    names = {pt: name for pt, name in STATIC_PAYLOADS.items()}
    for value in attrs.get("rtpmap", []):
        m = _RTPMAP.match(f"a=rtpmap:{value}")
        if m:
            names[m.group(1)] = m.group(2).lower()
    return any(names.get(pt) in CODECS for pt in formats)


def check_offer_sdp(sdp: str) -> None:
    """Raise ``SDPError`` unless ``sdp`` is a complete offer with a usable audio section."""
    if len(sdp) > MAX_SDP_BYTES:
        raise SDPError(f"the SDP is {len(sdp)} bytes; the limit is {MAX_SDP_BYTES}")
    lines = [line for line in sdp.replace("\r\n", "\n").split("\n") if line]
    if len(lines) > MAX_LINES:
        raise SDPError(f"the SDP has {len(lines)} lines; the limit is {MAX_LINES}")
    if not lines or lines[0] != "v=0":
        raise SDPError("the SDP must start with 'v=0'")
    for i, line in enumerate(lines):
        if not _LINE.match(line):
            raise SDPError(f"line {i + 1} is not an SDP line ('x=value' in printable ASCII)")
    sections: list[list[str]] = [[]]
    for line in lines:
        if line.startswith("m="):
            sections.append([])
        sections[-1].append(line)
    session, media = sections[0], sections[1:]
    for kind in ("o=", "s=", "t="):
        if not any(line.startswith(kind) for line in session):
            raise SDPError(f"the session part has no '{kind}' line")
    if not media:
        raise SDPError("the offer has no media section (m=audio)")
    if len(media) > MAX_MEDIA:
        raise SDPError(f"the offer has {len(media)} media sections; the limit is {MAX_MEDIA}")
    session_attrs = _attrs(session)
    audio_ok = False
    for section in media:
        m = _MEDIA.match(section[0])
        if m is None:
            raise SDPError(f"malformed media line {section[0][:60]!r}")
        kind, port, proto, formats = m.group(1), int(m.group(2)), m.group(3), m.group(4).split()
        if kind != "audio" or port == 0 or "RTP" not in proto:
            continue
        attrs = _attrs(section)
        _check_ice(_one(session_attrs, attrs, "ice-ufrag"), _one(session_attrs, attrs, "ice-pwd"))
        _check_fingerprints(_one(session_attrs, attrs, "fingerprint"))
        if not _has_codec(formats, attrs):
            raise SDPError("the audio section offers no codec this server speaks (opus, PCMU, PCMA)")
        audio_ok = True
    if not audio_ok:
        raise SDPError("the offer has no active RTP audio section (m=audio with a port)")
