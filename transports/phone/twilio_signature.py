"""Twilio request signatures (``X-Twilio-Signature``): HMAC-SHA1 of the URL and the POST parameters.

Twilio signs each webhook and the media-stream WebSocket handshake with the account's auth token:
base64(HMAC-SHA1(token, URL + every POST parameter name and value, sorted by name)). A request
without a valid signature did not come from Twilio.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from collections.abc import Iterable, Mapping

from aiohttp import web


def signature(auth_token: str, url: str, params: Mapping[str, str] | None = None) -> str:
    payload = url + "".join(f"{k}{v}" for k, v in sorted((params or {}).items()))
    digest = hmac.new(auth_token.encode(), payload.encode("utf-8", "surrogatepass"), hashlib.sha1).digest()
    return base64.b64encode(digest).decode()


def valid(auth_token: str, offered: str, urls: Iterable[str], params: Mapping[str, str] | None = None) -> bool:
    """True when ``offered`` is the signature of one of ``urls`` (with ``params``)."""
    if not offered:
        return False
    got = offered.encode("utf-8", "surrogatepass")
    return any(hmac.compare_digest(got, signature(auth_token, url, params).encode()) for url in urls)


def public_host(request: web.Request, trust_forwarded: bool) -> tuple[str, bool]:
    """(host, secure) as the caller addressed us; forwarded headers only from a trusted proxy."""
    host = request.host
    secure = request.secure
    if trust_forwarded:
        host = request.headers.get("X-Forwarded-Host", host).split(",")[0].strip() or host
        secure = secure or request.headers.get("X-Forwarded-Proto", "").split(",")[0].strip() == "https"
    return host, secure


def request_urls(request: web.Request, trust_forwarded: bool) -> list[str]:
    """The URLs Twilio may have signed for this request (http(s) and ws(s) spellings)."""
    host, secure = public_host(request, trust_forwarded)
    path = request.rel_url.raw_path_qs if hasattr(request.rel_url, "raw_path_qs") else str(request.rel_url)
    schemes = ("wss", "https") if secure else ("wss", "https", "ws", "http")
    return [f"{scheme}://{host}{path}" for scheme in schemes]


async def check(request: web.Request, auth_token: str, trust_forwarded: bool) -> bool:
    """Validate ``X-Twilio-Signature`` of a webhook (POST form) or WebSocket handshake (GET)."""
    params: dict[str, str] = {}
    if request.method == "POST" and request.content_type == "application/x-www-form-urlencoded":
        form = await request.post()
        params = {k: str(v) for k, v in form.items()}
    return valid(auth_token, request.headers.get("X-Twilio-Signature", ""), request_urls(request, trust_forwarded),
                 params)
