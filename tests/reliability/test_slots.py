"""Every admitted slot comes back, in bounded time, on the real server with the real engines (finding 1).

Before: an offer that never completed ICE held its slot forever (the pipeline ended at 60 s, then
``WebRTCSignalling._run`` waited forever in aiortc's ``close``); a phone call whose receive task
had died kept its slot and its pipeline until the process ended; calls had no maximum duration.
"""

from __future__ import annotations

import aiohttp
from aiohttp.test_utils import TestServer

from agent import phone_routes
from tests.ops.helpers import make_server
from tests.reliability.helpers import eventually
from transports.phone.loopback_caller import LoopbackCaller
from transports.phone.options import PhoneOptions

GRACE_S = 6.0  # the peer's close (bounded at 3 s) and the session's end


async def test_offers_that_never_connect_give_their_slots_back(embedded, offer_sdp):
    server, _ = make_server(embedded, admission={"max_sessions": 2, "queue_size": 0},
                            session={"connect_timeout_s": 1.5})
    app = server.make_app()
    async with TestServer(app) as ts, aiohttp.ClientSession() as http:
        for _ in range(2):  # the offering peers are gone: ICE can never complete
            async with http.post(str(ts.make_url("/api/offer")), json={"sdp": offer_sdp, "type": "offer"}) as r:
                assert r.status == 200, await r.text()
        async with http.get(str(ts.make_url("/ready"))) as r:
            assert r.status == 503  # full
        assert await eventually(lambda: server.gate.active == 0, 1.5 + GRACE_S), \
            f"{server.gate.active} slots still held"
        async with http.get(str(ts.make_url("/ready"))) as r:
            assert r.status == 200
    assert await eventually(lambda: not server.signalling.tasks and not server.signalling.connections, 2.0)
    assert not server.live


def _phone_server(embedded, options: PhoneOptions, **session):
    server, _ = make_server(embedded, admission={"max_sessions": 1, "queue_size": 0}, vad={"turn": "silence"},
                            session=session)
    phone_routes.install(server, options)
    transports = []
    run_caller = server.run_caller

    async def spy(transport, session_id, **kw):
        transports.append(transport)
        await run_caller(transport, session_id, **kw)

    server.run_caller = spy  # the phone extension looks it up per call
    return server, transports


async def test_a_call_whose_receive_task_died_is_ended_by_the_watchdog(embedded):
    server, transports = _phone_server(embedded, PhoneOptions(idle_timeout_s=120.0), idle_timeout_s=1.0)
    app = server.make_app()
    async with TestServer(app) as ts:
        caller = await LoopbackCaller(str(ts.make_url("/phone/ws")).replace("http", "ws")).connect()
        assert await eventually(lambda: bool(transports) and server.gate.active == 1
                                and transports[0].input()._task is not None, 10.0)
        transports[0].input()._task.cancel()  # the task that reads the socket is gone, silently
        assert await eventually(lambda: server.gate.active == 0, 1.0 + GRACE_S), "the dead call kept its slot"
        assert await caller.wait_closed(3.0)
        await caller.close()
        assert not server.live


async def test_a_call_ends_at_its_maximum_duration(embedded):
    server, _ = _phone_server(embedded, PhoneOptions(), max_duration_s=2.0)
    app = server.make_app()
    async with TestServer(app) as ts:
        caller = await LoopbackCaller(str(ts.make_url("/phone/ws")).replace("http", "ws")).connect()
        assert await eventually(lambda: server.gate.active == 1, 10.0)
        assert await caller.wait_closed(2.0 + GRACE_S), "the call outlived its maximum duration"
        assert await eventually(lambda: server.gate.active == 0, 2.0)
        await caller.close()
