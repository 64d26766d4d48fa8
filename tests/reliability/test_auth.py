"""Credentials before admission, on every route (finding 6; finding 3 for the phone socket).

Before: ``/api/offer``, ``/metrics``, ``/api/sessions/...`` (transcripts even with
``phone.expose_transcripts=false``), ``/phone/calls`` and the transcription API answered anyone,
and a web page on any origin could post offers.
"""

from __future__ import annotations

import aiohttp
from aiohttp import FormData
from aiohttp.test_utils import TestServer

from agent.config import Config
from agent.server_factory import make_server
from agent.turn_observer import TurnObserver, TurnTiming
from transports.phone.loopback_caller import LoopbackCaller

KEY = "k3y-for-tests"
BEARER = {"Authorization": f"Bearer {KEY}"}


def _server(**server_fields):
    config = Config()
    config.server.api_key = KEY
    for k, v in server_fields.items():
        setattr(config.server, k, v)
    config.phone.expose_transcripts = False
    server = make_server(config)
    return server, server.make_app()


async def test_every_route_but_the_probes_needs_the_key(offer_sdp):
    server, app = _server()
    turns = TurnObserver()
    turns.turns.append(TurnTiming(0, transcript_text="my card number", reply_text="noted"))
    server.sessions["s1"] = turns
    async with TestServer(app) as ts, aiohttp.ClientSession() as http:
        url = lambda path: str(ts.make_url(path))  # noqa: E731
        for method, path in (("POST", "/api/offer"), ("PATCH", "/api/offer"), ("GET", "/metrics"),
                             ("GET", "/api/sessions/s1"), ("GET", "/phone/calls"), ("GET", "/phone/calls/x")):
            async with http.request(method, url(path), json={"sdp": offer_sdp, "type": "offer"}) as r:
                assert r.status == 401, (method, path, r.status)
            async with http.request(method, url(path), headers={"Authorization": "Bearer wrong"}) as r:
                assert r.status == 401, (method, path, r.status)
        for path in ("/", "/health", "/ready"):
            async with http.get(url(path)) as r:
                assert r.status == 200, path
        async with http.get(url("/metrics"), headers=BEARER) as r:
            assert r.status == 200
        async with http.get(url(f"/metrics?token={KEY}")) as r:
            assert r.status == 200
        async with http.get(url("/api/sessions/s1"), headers=BEARER) as r:
            body = await r.json()
            assert r.status == 200 and "my card number" not in str(body) and "transcript" not in body["turns"][0]
        async with http.post(url("/api/offer"), headers=BEARER, json={"sdp": "v=0", "type": "offer"}) as r:
            assert r.status == 400  # past the key, on to the offer's own checks
        async with http.post(url(f"/api/offer?token={KEY}"), json={"sdp": "v=0", "type": "offer"}) as r:
            assert r.status == 401  # a key in the URL only for GET (WebSocket upgrades, the page)
        async with http.post(url("/phone/twiml")) as r:
            assert r.status == 404  # it would hand the key out; needs phone.twilio_auth_token
    assert server.gate.stats.admitted_total == 0


async def test_foreign_origins_are_refused(offer_sdp):
    server, app = _server(api_key="", allowed_origins="https://app.example")
    async with TestServer(app) as ts, aiohttp.ClientSession() as http:
        url = str(ts.make_url("/api/offer"))
        own = f"http://{ts.host}:{ts.port}"
        for origin, status in (("https://evil.example", 403), ("null", 403), ("https://app.example", 200),
                               (own, 200)):
            async with http.post(url, json={"sdp": offer_sdp, "type": "offer"}, headers={"Origin": origin}) as r:
                assert r.status == status, (origin, r.status, await r.text())
        async with http.get(str(ts.make_url("/phone/ws")), headers={"Origin": "https://evil.example"}) as r:
            assert r.status == 403
    await server.signalling.close(1.0)


async def test_the_phone_socket_takes_the_key_before_admission():
    server, app = _server()
    async with TestServer(app) as ts:
        ws = str(ts.make_url("/phone/ws")).replace("http", "ws")
        stranger = await LoopbackCaller(ws).connect(stream=False)
        assert await stranger.wait_closed(3.0) and stranger.close_code == 1008
        assert server.gate.stats.admitted_total == 0
        await stranger.close()


async def test_metrics_and_probes_open_on_their_own_listener():
    server, app = _server(metrics_listen="127.0.0.1:0")
    async with TestServer(server.probe_app(app)) as probe, aiohttp.ClientSession() as http:
        for path in ("/metrics", "/health", "/ready"):
            async with http.get(str(probe.make_url(path))) as r:
                assert r.status == 200, path
        async with http.get(str(probe.make_url("/phone/calls"))) as r:
            assert r.status == 404  # nothing else lives there


async def test_the_transcription_api_needs_the_key(whisper_transcriber):
    from asr.offline.server import ServerOptions, TranscriptionServer

    server = TranscriptionServer(whisper_transcriber, ServerOptions(api_key=KEY))
    async with TestServer(server.app()) as ts, aiohttp.ClientSession() as http:
        form = FormData()
        form.add_field("file", b"RIFF", filename="a.wav")
        form.add_field("model", "whisper-1")
        async with http.post(str(ts.make_url("/v1/audio/transcriptions")), data=form) as r:
            assert r.status == 401 and (await r.json())["error"]["code"] == "invalid_api_key"
        async with http.get(str(ts.make_url("/v1/models"))) as r:
            assert r.status == 401
        async with http.get(str(ts.make_url("/v1/models")), headers=BEARER) as r:
            assert r.status == 200
        async with http.get(str(ts.make_url("/health"))) as r:
            assert r.status == 200
