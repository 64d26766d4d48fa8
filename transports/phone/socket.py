"""One provider WebSocket (aiohttp): serialized sends, one close with a code and a reason."""

from __future__ import annotations

import asyncio
import contextlib

from aiohttp import WSMessage, web
from loguru import logger

from transports.phone.protocol import CLOSE_NORMAL


class PhoneSocket:
    def __init__(self, ws: web.WebSocketResponse, label: str = ""):
        self.ws = ws
        self.label = label
        self.close_code: int | None = None
        self.close_reason = ""
        self.closed_by_peer = False
        self.sent_messages = 0
        self._lock = asyncio.Lock()

    @property
    def open(self) -> bool:
        return self.close_code is None and not self.ws.closed

    async def receive(self, timeout: float | None) -> WSMessage:
        return await self.ws.receive(timeout=timeout)

    async def send(self, text: str) -> bool:
        """Send one text frame; False (never an exception) once the socket is gone."""
        if not self.open:
            return False
        try:
            async with self._lock:
                await self.ws.send_str(text)
            self.sent_messages += 1
            return True
        except (ConnectionError, RuntimeError) as exc:  # closing transport, reset by peer
            logger.debug(f"{self.label}: send failed: {exc}")
            return False

    def peer_closed(self, code: int | None, reason: str = "") -> None:
        if self.close_code is None:
            self.close_code = code if code is not None else 1006
            self.close_reason = reason or "connection dropped"
            self.closed_by_peer = True

    async def close(self, code: int = CLOSE_NORMAL, reason: str = "") -> None:
        """Close once with ``code``/``reason``; later calls (and a closed peer) are no-ops."""
        if self.close_code is None:
            self.close_code, self.close_reason = code, reason
        if not self.ws.closed:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.ws.close(code=code, message=reason.encode()[:123]), 1.0)
