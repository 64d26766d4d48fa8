"""The parent's connection dispatcher (transports/conn_dispatch.py) over real sockets: accepted connections go to the
least loaded worker's pair, ties rotate, a dead worker's pair is skipped, and a worker's receiver serves a handed
connection with a real aiohttp app and reports it."""

from __future__ import annotations

import asyncio
import socket

import httpx
from aiohttp import web

from transports.conn_dispatch import REPORT, ConnectionDispatcher, ConnectionReceiver


def _listener() -> socket.socket:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    return sock


async def _connect(port: int, n: int) -> list[tuple[asyncio.StreamReader, asyncio.StreamWriter]]:
    return [await asyncio.open_connection("127.0.0.1", port) for _ in range(n)]


def _take(theirs: socket.socket) -> int:
    """Descriptors waiting on a worker's end of its pair (each closed)."""
    theirs.setblocking(False)
    got = 0
    while True:
        try:
            _msg, fds, _flags, _addr = socket.recv_fds(theirs, 16, 8)
        except BlockingIOError:
            return got
        for fd in fds:
            socket.socket(fileno=fd).close()
            got += 1


async def _settle() -> None:
    for _ in range(20):
        await asyncio.sleep(0.01)


def test_connections_spread_evenly_then_follow_the_reported_load():
    async def main() -> None:
        listener = _listener()
        dispatcher = ConnectionDispatcher(listener, 3, asyncio.get_running_loop())
        ends = [dispatcher.new_lane(i) for i in range(3)]
        dispatcher.start(64)
        clients = await _connect(listener.getsockname()[1], 6)
        await _settle()
        assert [_take(e) for e in ends] == [2, 2, 2]  # the kernel's hash would not guarantee this
        assert [lane.load for lane in dispatcher.lanes] == [2, 2, 2]  # handed, not yet reported
        # the workers report: all received; worker 0 carries 5 calls, worker 1 one, worker 2 none
        for end, load in zip(ends, (5, 1, 0), strict=True):
            end.send(REPORT.pack(2, load))
        await _settle()
        assert [lane.load for lane in dispatcher.lanes] == [5, 1, 0]
        clients += await _connect(listener.getsockname()[1], 2)
        await _settle()
        assert [_take(e) for e in ends] == [0, 1, 1]  # worker 2 first (0 -> 1), then a tie at 1 rotates to 1
        ends[2].close()  # worker 2 dies: its pair's end of file closes the lane
        await _settle()
        assert dispatcher.lanes[2] is None
        clients += await _connect(listener.getsockname()[1], 1)
        await _settle()
        assert [_take(e) for e in ends[:2]] == [0, 1] and dispatcher.dropped == 0
        ends[2] = dispatcher.new_lane(2)  # restarted: no connections while it loads, its share once ready
        clients += await _connect(listener.getsockname()[1], 2)
        await _settle()
        assert [_take(e) for e in ends] == [0, 2, 0]  # worker 1 (1 reported + 2 unreported) is below 0's 5 for both
        dispatcher.mark_ready(2)
        clients += await _connect(listener.getsockname()[1], 1)
        await _settle()
        assert [_take(e) for e in ends] == [0, 0, 1]
        dispatcher.close()
        listener.close()
        for _reader, writer in clients:
            writer.close()

    asyncio.run(main())


def test_a_connection_no_worker_can_take_is_closed_not_left_hanging():
    async def main() -> None:
        listener = _listener()
        dispatcher = ConnectionDispatcher(listener, 1, asyncio.get_running_loop())
        dispatcher.new_lane(0).close()
        await _settle()
        dispatcher.start(64)
        reader, writer = await asyncio.open_connection("127.0.0.1", listener.getsockname()[1])
        assert await asyncio.wait_for(reader.read(), 5) == b""  # closed by the parent
        assert dispatcher.dropped == 1
        writer.close()
        dispatcher.close()
        listener.close()

    asyncio.run(main())


def test_a_worker_serves_a_handed_connection_and_reports_it():
    async def main() -> None:
        loop = asyncio.get_running_loop()
        app = web.Application()
        app.router.add_get("/who", lambda _r: web.Response(text="worker"))
        runner = web.AppRunner(app)
        await runner.setup()
        server = runner.server
        assert server is not None
        listener = _listener()
        dispatcher = ConnectionDispatcher(listener, 1, loop)
        theirs = dispatcher.new_lane(0)
        receiver = ConnectionReceiver(theirs.detach(), server, lambda: len(server.connections), report_s=0.02)
        receiver.start(loop)
        dispatcher.start(64)
        url = f"http://127.0.0.1:{listener.getsockname()[1]}/who"
        async with httpx.AsyncClient() as http:
            answer = await http.get(url)
            assert answer.status_code == 200 and answer.text == "worker"
            await asyncio.sleep(0.1)
            lane = dispatcher.lanes[0]
            assert lane is not None and (lane.handed, lane.received, lane.reported) == (1, 1, 1)  # kept alive
        await asyncio.sleep(0.1)
        assert lane.reported == 0 and lane.load == 0  # the client closed its connection
        receiver.close()
        await asyncio.sleep(0.05)
        assert dispatcher.lanes[0] is None  # the worker's end closed: so is the lane
        dispatcher.close()
        listener.close()
        await runner.cleanup()

    asyncio.run(main())
