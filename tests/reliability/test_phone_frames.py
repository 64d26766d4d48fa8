"""The phone socket against hostile frames and strangers (findings 2, 3, 7, 8), on the parrot bot.

Before: a 60 KB frame of nested brackets after ``start`` killed the receive task (the call stayed
active, its slot held, shutdown hung); sockets without the token took a slot at upgrade (four of
them kept every legitimate caller out); a lone-surrogate token closed 1000 with a traceback; a
sender at 20x real time had all its audio queued for the ASR; ``/phone/twiml`` reflected
``X-Forwarded-Host``.
"""

from __future__ import annotations

import asyncio
import base64
import json

import aiohttp
import pytest
from hypothesis import given
from hypothesis import strategies as st

from agent.admission import AdmissionGate
from agent.config import AdmissionConfig
from tests.phone.parrot import parrot_server
from tests.reliability.helpers import eventually
from transports.phone.loopback_caller import LoopbackCaller
from transports.phone.options import PhoneOptions

SILENCE_20MS = base64.b64encode(b"\xff" * 160).decode()


def gate(sessions: int = 1) -> AdmissionGate:
    return AdmissionGate(AdmissionConfig(max_sessions=sessions, queue_size=0, queue_timeout_s=0.1))


async def settled(endpoint, admission, timeout_s: float = 5.0) -> bool:
    return await eventually(lambda: not endpoint.active and admission.active == 0, timeout_s)


@pytest.mark.parametrize("frame, code, words", [
    ("[" * 15_000, 1007, "nested"),  # within the frame limit: RecursionError in json.loads
    ("[" * 60_000, 1009, ""),  # beyond it: closed by the WebSocket layer
])
async def test_nested_json_mid_call_closes_cleanly_and_frees_the_slot(frame, code, words):
    admission = gate()
    async with parrot_server(b"", gate=admission) as (url, endpoint):
        caller = await LoopbackCaller(url).connect(stream=False)
        assert await eventually(lambda: caller.stream_sid in endpoint.active, 3.0)
        await caller.send(frame)
        assert await caller.wait_closed(3.0)
        assert caller.close_code == code and words in caller.close_reason, (caller.close_code, caller.close_reason)
        assert await settled(endpoint, admission), "the call kept its slot"
        await caller.close()


frames = st.one_of(
    st.text(max_size=300),
    st.binary(max_size=300),
    st.integers(1, 20_000).map(lambda n: "[" * n),
    st.integers(1, 5_000).map(lambda n: '{"event": "media", "media": ' * n),
    st.fixed_dictionaries({"event": st.sampled_from(["media", "dtmf", "mark", "start", "connected", "stop", "x"]),
                           "streamSid": st.one_of(st.none(), st.text(max_size=8)),
                           "media": st.dictionaries(st.sampled_from(["payload", "track"]),
                                                    st.one_of(st.text(max_size=40), st.integers()), max_size=2),
                           "dtmf": st.dictionaries(st.just("digit"), st.text(max_size=3), max_size=1),
                           "mark": st.dictionaries(st.just("name"), st.one_of(st.text(max_size=8), st.none()),
                                                   max_size=1)}).map(json.dumps),
)


@given(frame=frames)
async def test_any_frame_mid_call_ends_cleanly_or_is_taken(frame):
    admission = gate()
    async with parrot_server(b"", gate=admission, barge_in=False) as (url, endpoint):
        caller = await LoopbackCaller(url).connect(stream=False)
        assert await eventually(lambda: caller.stream_sid in endpoint.active, 3.0)
        await caller.send(frame)
        await caller.send({"event": "media", "streamSid": caller.stream_sid, "media": {"payload": SILENCE_20MS}})
        closed = await caller.wait_closed(0.3)
        if closed:
            assert caller.close_code in (1000, 1003, 1007, 1008, 1009), (caller.close_code, caller.close_reason)
        else:  # the frame was acceptable: the call is alive and its reader too
            assert caller.stream_sid in endpoint.active
            await caller.hang_up()
        assert await settled(endpoint, admission), "the call kept its slot"
        await caller.close()


async def test_strangers_never_hold_a_slot():
    admission = gate(sessions=1)
    opts = PhoneOptions(token="s3cret", handshake_timeout_s=3.0)
    async with parrot_server(b"", gate=admission, options=opts) as (url, endpoint):
        strangers = [await LoopbackCaller(url).connect(handshake=False, stream=False) for _ in range(4)]
        wrong = await LoopbackCaller(url, custom_parameters={"token": "guess"}).connect(stream=False)
        await asyncio.sleep(0.2)
        assert admission.active == 0, "a socket without credentials took a slot"
        caller = await LoopbackCaller(url, custom_parameters={"token": "s3cret"}).connect()
        assert await eventually(lambda: caller.stream_sid in endpoint.active, 3.0), caller.close_reason
        assert await wrong.wait_closed(2.0) and wrong.close_code == 1008
        await caller.hang_up()
        assert await settled(endpoint, admission)
        # a wrong ?token= is refused before the upgrade
        async with aiohttp.ClientSession() as http, http.get(url.replace("ws://", "http://") + "?token=nope") as r:
            assert r.status == 401
        for s in [*strangers, wrong]:
            await s.close()


async def test_a_lone_surrogate_token_is_a_wrong_token():
    admission = gate()
    async with parrot_server(b"", gate=admission, options=PhoneOptions(token="s3cret")) as (url, endpoint):
        caller = await LoopbackCaller(url, custom_parameters={"token": "\ud800"}).connect(stream=False)
        assert await caller.wait_closed(3.0)
        assert caller.close_code == 1008 and "unauthorized" in caller.close_reason
        assert await settled(endpoint, admission)
        await caller.close()


async def test_a_fast_sender_is_held_to_real_time():
    admission = gate()
    opts = PhoneOptions(max_input_rt_ratio=1.5, input_burst_s=1.0)
    async with parrot_server(b"", gate=admission, options=opts, barge_in=False) as (url, endpoint):
        caller = await LoopbackCaller(url).connect(stream=False)
        assert await eventually(lambda: caller.stream_sid in endpoint.active, 3.0)
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        sent = 0
        while loop.time() - t0 < 1.0:  # 20x real time for one second: 20 s of audio
            for _ in range(20):
                await caller.send({"event": "media", "streamSid": caller.stream_sid,
                                   "media": {"payload": SILENCE_20MS}})
                sent += 1
            await asyncio.sleep(0.02)
        elapsed = loop.time() - t0
        record = endpoint.active[caller.stream_sid][0]
        await asyncio.sleep(0.2)
        accepted = (record.stats.media_in - record.stats.media_dropped) * 0.02
        assert sent * 0.02 > 15.0
        assert accepted <= 1.0 + 1.5 * (elapsed + 0.3), f"{accepted:.1f} s of audio taken in {elapsed:.1f} s"
        assert record.stats.media_dropped > 0
        await caller.hang_up()
        assert await settled(endpoint, admission)


async def test_twiml_does_not_reflect_forwarded_headers_unless_trusted():
    async with parrot_server(b"") as (url, _endpoint):
        http_url = url.replace("ws://", "http://").replace("/phone/ws", "/phone/twiml")
        async with aiohttp.ClientSession() as http, \
                http.post(http_url, headers={"X-Forwarded-Host": "evil.example", "X-Forwarded-Proto": "https"}) as r:
            body = await r.text()
        assert r.status == 200 and "evil.example" not in body and "ws://127.0.0.1:" in body


async def test_twilio_signatures_are_checked_before_the_upgrade():
    from transports.phone.twilio_signature import signature

    admission = gate()
    opts = PhoneOptions(twilio_auth_token="tw-secret", token="s3cret")
    async with parrot_server(b"", gate=admission, options=opts) as (url, endpoint), aiohttp.ClientSession() as http:
        async with http.get(url, headers={"Upgrade": "websocket", "Connection": "Upgrade",
                                          "Sec-WebSocket-Version": "13", "Sec-WebSocket-Key": "x3JJHMbDL1EzLkh9GBhXDw==",
                                          "X-Twilio-Signature": signature("wrong", url)}) as r:
            assert r.status == 403
        twiml = url.replace("ws://", "http://").replace("/phone/ws", "/phone/twiml")
        form = {"CallSid": "CA1", "From": "+15550100"}
        async with http.post(twiml, data=form) as r:
            assert r.status == 403  # unsigned
        async with http.post(twiml, data=form, headers={"X-Twilio-Signature": signature("tw-secret", twiml, form)}) as r:
            body = await r.text()
            assert r.status == 200 and 'name="token" value="s3cret"' in body  # signed: the stream carries it
        ws = await http.ws_connect(url, headers={"X-Twilio-Signature": signature("tw-secret", url)})
        sid = "MZsigned"
        await ws.send_str(json.dumps({"event": "start", "streamSid": sid, "start": {"streamSid": sid}}))
        assert await eventually(lambda: sid in endpoint.active, 3.0), "a signed call without a token was refused"
        await ws.close()
        assert await settled(endpoint, admission)
