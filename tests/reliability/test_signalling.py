"""/api/offer against hostile bodies: nothing but a 4xx, and no admission slot spent (findings 1, 2, 8).

Before: truncated or mangled SDPs were answered 200 and started sessions that never connected,
a 60 KB body of nested brackets was a 500 (RecursionError), junk on a live ``pc_id`` or in a
PATCH was a 500, and a ``text/plain`` offer (which any web page can send cross-site) was taken.
"""

from __future__ import annotations

import aiohttp
from aiohttp.test_utils import TestServer
from hypothesis import given
from hypothesis import strategies as st
from pipecat.transports.smallwebrtc.connection import SmallWebRTCConnection

from agent.config import Config
from agent.server_factory import make_server
from tests.reliability.helpers import mutilations, sdp_lines


async def _server(**admission):
    config = Config()
    config.admission.max_sessions = admission.get("max_sessions", 1)
    server = make_server(config)
    return server, server.make_app()


async def test_mangled_offers_are_400_and_take_no_slot(offer_sdp):
    server, app = await _server()
    bodies = [*({"sdp": sdp, "type": "offer"} for sdp in mutilations(offer_sdp).values())]
    async with TestServer(app) as ts, aiohttp.ClientSession() as http:
        url = str(ts.make_url("/api/offer"))
        for body in bodies:
            async with http.post(url, json=body) as r:
                assert r.status == 400, (r.status, await r.text())
        nested = "[" * 60_000  # 60 KB of nesting: RecursionError in json.loads
        async with http.post(url, data=nested, headers={"Content-Type": "application/json"}) as r:
            assert r.status == 400 and "nested" in (await r.json())["error"]
        async with http.post(url, data='{"sdp": "v=0", "type": "offer"}', headers={"Content-Type": "text/plain"}) as r:
            assert r.status == 415  # a cross-site "simple request" cannot carry an offer
        async with http.get(str(ts.make_url("/ready"))) as r:
            assert r.status == 200
    assert server.gate.stats.admitted_total == 0 and server.gate.active == 0


@given(body=st.one_of(
    st.binary(max_size=2000),
    st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=40),
                 lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children,
                                                                                   max_size=4), max_leaves=30)
    .map(lambda v: __import__("json").dumps(v).encode()),
    st.integers(100, 5000).map(lambda n: b"{\"sdp\": " * n),
))
async def test_fuzzed_offer_bodies_are_never_a_500(body):
    server, app = await _server()
    async with TestServer(app) as ts, aiohttp.ClientSession() as http:
        for method in ("POST", "PATCH"):
            async with http.request(method, str(ts.make_url("/api/offer")), data=body,
                                    headers={"Content-Type": "application/json"}) as r:
                assert r.status in (400, 404), (method, r.status, await r.text())
    assert server.gate.active == 0


async def test_junk_on_a_live_peer_is_400(offer_sdp):
    server, app = await _server()
    conn = SmallWebRTCConnection()
    await conn.initialize(sdp=offer_sdp, type="offer")
    server.signalling.connections[conn.pc_id] = conn
    try:
        async with TestServer(app) as ts, aiohttp.ClientSession() as http:
            url = str(ts.make_url("/api/offer"))
            junk_sdp = offer_sdp.replace("m=audio", "m=video")  # well-formed, but no audio: 400 before aiortc
            for body in ({"sdp": "v=0\r\njunk", "type": "offer", "pc_id": conn.pc_id},
                         {"sdp": junk_sdp, "type": "offer", "pc_id": conn.pc_id}):
                async with http.post(url, json=body) as r:
                    assert r.status == 400, await r.text()
            for patch in ({"pc_id": conn.pc_id, "candidates": ["junk"]},
                          {"pc_id": conn.pc_id, "candidates": [{"candidate": "candidate:junk"}]},
                          {"pc_id": conn.pc_id, "candidates": [{"candidate": 7}]},
                          {"pc_id": conn.pc_id, "candidates": {"a": 1}},
                          [1, 2]):
                async with http.patch(url, json=patch) as r:
                    assert r.status == 400, (patch, r.status, await r.text())
    finally:
        await conn.disconnect()


@given(st.data())
async def test_truncated_or_thinned_offers_are_400_or_answered_never_500(offer_sdp, data):
    """Random line loss and truncation of a real offer: a 400, or an answer whose slot comes back."""
    lines = sdp_lines(offer_sdp)
    keep = data.draw(st.lists(st.booleans(), min_size=len(lines), max_size=len(lines)))
    text = "\r\n".join(line for line, k in zip(lines, keep, strict=True) if k or line == "v=0") + "\r\n"
    text = text[:data.draw(st.integers(3, len(text)))]
    server, app = await _server(max_sessions=4)
    async with TestServer(app) as ts, aiohttp.ClientSession() as http:
        async with http.post(str(ts.make_url("/api/offer")), json={"sdp": text, "type": "offer"}) as r:
            assert r.status in (200, 400), (r.status, await r.text())
            answered = r.status == 200
        assert server.gate.stats.admitted_total == int(answered)
        await server.signalling.close(2.0)  # (no engines here: an answered session ends at once)
    assert server.gate.active == 0
