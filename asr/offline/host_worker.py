"""One host worker of ``cadence transcribe-server --workers N``: HTTP, upload, decode, plan, stitch, format.

Started by the engine process (``host_pool``) as ``python -m asr.offline.host_worker --ipc-fd A
--inflight-fd B``: A is its end of a Unix socket pair to the engine process (the first message is
its configuration: the engine's facts, the server's options, the address to listen on), B the
shared ``max_inflight`` counter. Its connections come from the engine process over a third descriptor
named in the configuration (``conn_fd``: ``transports.conn_dispatch``), or, with ``balance="kernel"``, it
listens on the server's port with its own SO_REUSEPORT socket (the kernel spreads new connections). It
serves the same ``TranscriptionServer`` as the one-process server, with the engine process's
batcher and audio budget. It imports no engine (no torch): it starts in about a second.

It stops on SIGTERM (the engine process sends it) or when the engine process's end of the socket
closes; SIGINT is ignored (a terminal's Ctrl-C reaches the engine process, which stops it).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import signal
import socket

from aiohttp import web

from asr.offline.host_pool import listening_socket
from asr.offline.inflight import SharedInflight
from asr.offline.ipc import receive
from asr.offline.remote_engine import EngineLink, RemoteBatcher, RemoteBudget
from asr.offline.server import TranscriptionServer
from asr.offline.shm_audio import SegmentWriter
from asr.offline.transcriber import OfflineTranscriber
from transports.conn_dispatch import ConnectionReceiver

log = logging.getLogger("cadence.transcribe_server")

SHUTDOWN_TIMEOUT_S = 5.0  # requests in progress at SIGTERM get this long


async def serve(ipc_fd: int, inflight_fd: int) -> None:
    reader, writer = await asyncio.open_unix_connection(sock=socket.socket(fileno=ipc_fd))
    kind, config = await receive(reader)
    if kind != "config":
        raise RuntimeError(f"expected the worker's configuration first, got {kind!r}")
    logging.basicConfig(level=config["log_level"], format=f"worker {config['index']}: %(levelname)s %(message)s")
    stop = asyncio.Event()
    link = EngineLink(reader, writer, on_lost=stop.set)
    link.start()
    transcriber = OfflineTranscriber(config["engine"], batcher=RemoteBatcher(link, SegmentWriter(config["segments"])))
    server = TranscriptionServer(transcriber, config["options"], SharedInflight(inflight_fd, config["index"]),
                                 RemoteBudget(link))
    import soundfile  # noqa: F401  (decode's libraries, loaded now rather than by the first request)
    import soxr  # noqa: F401

    runner = web.AppRunner(server.app(), access_log=None, handle_signals=False, shutdown_timeout=SHUTDOWN_TIMEOUT_S)
    await runner.setup()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    receiver = None
    try:
        if config.get("conn_fd") is not None:  # the engine process accepts and hands connections over
            http = runner.server
            assert http is not None
            receiver = ConnectionReceiver(config["conn_fd"], http, lambda: len(http.connections))
            receiver.start(loop)
        else:
            host, port = config["listen"]
            site = web.SockSite(runner, listening_socket(host, port, config["backlog"]), backlog=config["backlog"])
            await site.start()
        link.send(("ready", config["index"]))
        await stop.wait()
    finally:
        if receiver is not None:
            receiver.close()
        await runner.cleanup()
        await link.close()


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ipc-fd", type=int, required=True)
    ap.add_argument("--inflight-fd", type=int, required=True)
    args = ap.parse_args(argv)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    main_coro = serve(args.ipc_fd, args.inflight_fd)
    try:
        import uvloop
    except ImportError:
        asyncio.run(main_coro)
        return
    with contextlib.suppress(KeyboardInterrupt):
        uvloop.run(main_coro)


if __name__ == "__main__":
    main()
