"""Connections spread over ``cadence serve --workers N`` by load, instead of by the kernel's hash.

With SO_REUSEPORT the kernel hashes each connection's addresses to one worker's socket, and a call stays
where it lands. 64 loopback connections over 8 listeners landed 4-17 and 5-12 per listener (max / mean
2.1 and 1.5), 256 landed 23-40 (1.25), and run 62's top.log shows the cost at 64 callers: workers at 36-88%
of a core, so the busiest one saturates while the others idle.

With ``server.balance = "least_loaded"`` the parent listens on the port alone and hands every accepted
connection (its file descriptor, SCM_RIGHTS over a ``SOCK_SEQPACKET`` pair per worker) to the worker with the
least load: its live sessions or open connections (the larger: a phone call is one connection, a browser call
outlives its offer's), plus the connections still on their way to it. Each worker reports what it has received
and its load every 50 ms when they change; until then the connections it has not reported count. Ties rotate.
A worker gets connections once it is marked ready (a restarted one loads its models first: a caller
handed to it then would wait that long); one whose pair is closed (it died) gets nothing until it is restarted
with a new pair and ready again.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from loguru import logger

REPORT = struct.Struct("<II")  # (connections received, load), worker -> parent
CONN_FD_ENV = "CADENCE_CONN_FD"  # the worker's end of its pair, passed to it as an inherited descriptor


@dataclass
class Lane:
    """The parent's end of one worker's pair and what it knows of that worker's load."""

    sock: socket.socket
    handed: int = 0  # connections sent down this pair
    received: int = 0  # ... of which the worker has reported receiving
    reported: int = 0  # the worker's load as last reported (live sessions or open connections, the larger)
    ready: bool = False  # the worker is serving: until then (its start, a restart) it gets no connections

    @property
    def load(self) -> int:
        return self.reported + max(0, self.handed - self.received)


class ConnectionDispatcher:
    """The parent's side: accepts on ``listener`` and hands each connection to the least loaded worker."""

    def __init__(self, listener: socket.socket, workers: int, loop: asyncio.AbstractEventLoop):
        self.listener = listener
        self.lanes: list[Lane | None] = [None] * workers
        self.dropped = 0  # connections closed because no worker could take them
        self._rotation = 0
        self._loop = loop
        self._accepting = False

    def start(self, backlog: int) -> None:
        """The workers started so far serve: listen on the bound listener and start handing connections over."""
        for lane in self.lanes:
            if lane is not None:
                lane.ready = True
        self.listener.listen(backlog)
        self.listener.setblocking(False)
        self._loop.add_reader(self.listener.fileno(), self._on_accept)
        self._accepting = True

    def new_lane(self, index: int) -> socket.socket:
        """A fresh pair for worker ``index`` (its first start or a restart), not ready yet; returns the worker's
        end, which the caller passes to the worker and then closes."""
        self.close_lane(index)
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        ours.setblocking(False)
        self.lanes[index] = Lane(ours)
        self._loop.add_reader(ours.fileno(), self._on_report, index)
        return theirs

    def mark_ready(self, index: int) -> None:
        """Worker ``index`` serves now: connections may go to it."""
        lane = self.lanes[index]
        if lane is not None:
            lane.ready = True

    def close_lane(self, index: int) -> None:
        lane = self.lanes[index]
        if lane is None:
            return
        self.lanes[index] = None
        self._loop.remove_reader(lane.sock.fileno())
        lane.sock.close()

    def close(self) -> None:
        if self._accepting:
            self._accepting = False
            with contextlib.suppress(ValueError, OSError):  # the listener may already be closed
                self._loop.remove_reader(self.listener.fileno())
        for index in range(len(self.lanes)):
            self.close_lane(index)

    def order(self) -> list[int]:
        """Ready lanes, least loaded first; equal loads in turn from the one after the last chosen."""
        n = len(self.lanes)
        open_ = [i for i, lane in enumerate(self.lanes) if lane is not None and lane.ready]
        return sorted(open_, key=lambda i: (self.lanes[i].load, (i - self._rotation) % n))  # type: ignore[union-attr]

    def dispatch(self, conn: socket.socket) -> int | None:
        """Send ``conn`` to a worker; the index it went to, or None if no worker could take it.
        The caller closes its own copy of ``conn`` either way."""
        for index in self.order():
            lane = self.lanes[index]
            assert lane is not None
            try:
                socket.send_fds(lane.sock, [b"c"], [conn.fileno()])
            except (BlockingIOError, InterruptedError):
                continue  # its queue is full (a stalled worker): the next one
            except OSError as exc:
                logger.warning(f"worker {index}'s connection pair failed ({exc}); it gets no calls until restarted")
                self.close_lane(index)
                continue
            lane.handed += 1
            self._rotation = (index + 1) % len(self.lanes)
            return index
        self.dropped += 1
        return None

    def _on_accept(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:  # EMFILE and the like: the connection waits in the backlog
                logger.error(f"accept failed: {exc}")
                return
            with conn:
                if self.dispatch(conn) is None:
                    logger.error("no worker could take a connection: closed")

    def _on_report(self, index: int) -> None:
        lane = self.lanes[index]
        if lane is None:
            return
        while True:
            try:
                data = lane.sock.recv(64)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                data = b""
            if not data:  # the worker exited
                self.close_lane(index)
                return
            if len(data) == REPORT.size:
                lane.received, lane.reported = REPORT.unpack(data)


class ConnectionReceiver:
    """A worker's side: serves the connections the parent hands over with ``protocol_factory`` (an aiohttp
    ``AppRunner.server``) and reports what it received and its ``load()`` every ``report_s`` when they change.
    Not at once on receipt: a report taken before the connection is open would count it nowhere."""

    def __init__(self, fd: int, protocol_factory: Callable[[], Any], load: Callable[[], int],
                 report_s: float = 0.05):
        self.sock = socket.socket(fileno=fd)
        self.sock.setblocking(False)
        self.factory = protocol_factory
        self.load = load
        self.report_s = report_s
        self.received = 0
        self._sent: tuple[int, int] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._tasks: set[asyncio.Task] = set()
        self._reporter: asyncio.Task | None = None

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        loop.add_reader(self.sock.fileno(), self._on_ready)
        self._reporter = loop.create_task(self._report_every())

    def _on_ready(self) -> None:
        assert self._loop is not None
        while True:
            try:
                _msg, fds, _flags, _addr = socket.recv_fds(self.sock, 16, 8)
            except (BlockingIOError, InterruptedError):
                break
            except OSError as exc:
                logger.error(f"the parent's connection pair failed: {exc}")
                self._stop_reading()
                return
            if not _msg and not fds:  # the parent is gone (the worker dies with it: PDEATHSIG)
                self._stop_reading()
                return
            for fd in fds:
                self.received += 1
                self._serve(socket.socket(fileno=fd))

    def _serve(self, conn: socket.socket) -> None:
        assert self._loop is not None
        conn.setblocking(False)
        task = self._loop.create_task(self._loop.connect_accepted_socket(self.factory, conn))
        self._tasks.add(task)
        task.add_done_callback(lambda t: self._served(t, conn))

    def _served(self, task: asyncio.Task, conn: socket.socket) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            logger.warning(f"a handed-over connection could not be served: {task.exception()!r}")
            conn.close()

    def report(self) -> None:
        """Tell the parent (connections received, load) if that changed since the last report."""
        state = (self.received, self.load())
        if state == self._sent or self.sock.fileno() < 0:
            return
        try:
            self.sock.send(REPORT.pack(*state))
        except (BlockingIOError, InterruptedError):
            return  # sent on the next change or tick
        except OSError:
            return
        self._sent = state

    async def _report_every(self) -> None:
        while True:
            await asyncio.sleep(self.report_s)
            self.report()

    def _stop_reading(self) -> None:
        if self._loop is not None and self.sock.fileno() >= 0:
            self._loop.remove_reader(self.sock.fileno())

    def close(self) -> None:
        if self._reporter is not None:
            self._reporter.cancel()
        self._stop_reading()
        self.sock.close()
