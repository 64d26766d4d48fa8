"""Who may use the server: the API key and the Origin allow-list, checked before any handler runs.

- ``server.api_key`` (non-empty): every route needs ``Authorization: Bearer KEY``; GET requests
  (WebSocket upgrades, the page's own URL) may carry ``?token=KEY`` instead. Open: the page
  itself (``/``, static HTML whose script forwards its ``?token=``), ``/health`` and ``/ready``
  (liveness/readiness probes: counts only), and the routes that authenticate their own callers
  (the phone socket: Twilio signature or token, checked before admission).
- ``server.allowed_origins``: a request that carries an ``Origin`` header must come from the
  server's own origin or one listed ("*": any); otherwise 403. This stops any web page from
  spending the server's slots from its visitors' browsers.
"""

from __future__ import annotations

import hmac
from collections.abc import Awaitable, Callable, Iterable
from urllib.parse import urlsplit

from aiohttp import web

OPEN_PATHS = frozenset({"/", "/health", "/ready"})
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def _same(offered: str, key: str) -> bool:
    return hmac.compare_digest(offered.encode("utf-8", "surrogatepass"), key.encode("utf-8", "surrogatepass"))


def offered_key(request: web.Request) -> str:
    auth = request.headers.get("Authorization", "")
    scheme, _, value = auth.partition(" ")
    if scheme.lower() == "bearer" and value.strip():
        return value.strip()
    if request.method == "GET":
        return request.query.get("token", "")
    return ""


def has_key(request: web.Request, api_key: str) -> bool:
    return not api_key or _same(offered_key(request), api_key)


def parse_origins(text: str) -> frozenset[str]:
    return frozenset(o.strip().rstrip("/").lower() for o in text.split(",") if o.strip())


def origin_allowed(request: web.Request, allowed: frozenset[str]) -> bool:
    origin = request.headers.get("Origin")
    if origin is None:
        return True  # not a browser's cross-site request (curl, a provider, a test client)
    origin = origin.strip().rstrip("/").lower()
    if "*" in allowed or origin in allowed:
        return True
    return urlsplit(origin).netloc == request.host.lower() and origin != "null"


def middleware(api_key: str, allowed_origins: str, self_authenticated: Iterable[str] = ()) -> Callable:
    """The aiohttp middleware enforcing both (``self_authenticated``: paths that check their own callers)."""
    allowed = parse_origins(allowed_origins)
    own = self_authenticated

    @web.middleware
    async def guard(request: web.Request, handler: Handler) -> web.StreamResponse:
        if not origin_allowed(request, allowed):
            return web.json_response({"error": "this Origin is not allowed (server.allowed_origins)"}, status=403)
        path = request.path
        if api_key and path not in OPEN_PATHS and path not in own and not has_key(request, api_key):
            return web.json_response({"error": "unauthorized: send Authorization: Bearer <server.api_key>"},
                                     status=401, headers={"WWW-Authenticate": "Bearer"})
        return await handler(request)

    return guard
