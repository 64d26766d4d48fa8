"""Small shared pieces of the reliability tests: offers, waiting for a condition, process figures."""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
import time
from collections.abc import AsyncIterator, Callable

import psutil
from aiohttp import web
from aiortc import RTCPeerConnection


@contextlib.asynccontextmanager
async def served(app: web.Application) -> AsyncIterator[str]:
    """Serve ``app`` on loopback the way the commands do (``AppRunner`` defaults: handlers are not
    cancelled when their client leaves, unlike aiohttp's ``TestServer``); yields the base URL."""
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    try:
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        yield f"http://127.0.0.1:{runner.addresses[0][1]}"
    finally:
        await runner.cleanup()


async def real_offer() -> str:
    """A complete SDP offer (with candidates) from a real aiortc peer, which is then closed."""
    pc = RTCPeerConnection()
    pc.addTransceiver("audio", direction="sendrecv")
    await pc.setLocalDescription(await pc.createOffer())
    sdp = pc.localDescription.sdp
    await pc.close()
    return sdp


async def eventually(check: Callable[[], bool], timeout_s: float, every_s: float = 0.05) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return True
        await asyncio.sleep(every_s)
    return check()


def figures() -> tuple[int, int, float]:
    """(open fds, threads, RSS MiB) of this process."""
    proc = psutil.Process()
    return len(os.listdir("/proc/self/fd")), threading.active_count(), proc.memory_info().rss / 2**20


def sdp_lines(sdp: str) -> list[str]:
    return [line for line in sdp.split("\r\n") if line]


def mutilations(sdp: str) -> dict[str, str]:
    lines = sdp_lines(sdp)
    fp = next(i for i, line in enumerate(lines) if line.startswith("a=fingerprint:sha-256"))
    pwd = next(i for i, line in enumerate(lines) if line.startswith("a=ice-pwd:"))
    m = next(i for i, line in enumerate(lines) if line.startswith("m=audio"))
    drop = lambda prefix: "\r\n".join(line for line in lines if not line.startswith(prefix)) + "\r\n"  # noqa: E731
    return {
        "cut in the fingerprint": "\r\n".join(lines[:fp] + [lines[fp][:40]]),
        "cut in the ice-pwd": "\r\n".join(lines[:pwd] + [lines[pwd][:16]]),
        "cut after m=audio": "\r\n".join(lines[:m + 1]),
        "cut in m=audio": "\r\n".join(lines[:m] + [lines[m][:9]]),
        "no ice-ufrag": drop("a=ice-ufrag"),
        "no ice-pwd": drop("a=ice-pwd"),
        "no fingerprint": drop("a=fingerprint"),
        "no codec": "\r\n".join(lines[:m] + ["m=audio 9 UDP/TLS/RTP/SAVPF 120"]
                                + [line for line in lines[m + 1:] if not line.startswith("a=rtpmap")]),
        "port 0": sdp.replace(lines[m], "m=audio 0 " + lines[m].split(" ", 2)[2]),
        "binary junk": "v=0\r\n\x00\x01\x02",
        "no media": "\r\n".join(lines[:m]),
    }
