"""The phone transport against a real WebSocket client, with a small real pipeline (VAD + a fixed reply).

Everything but the models runs for real: aiohttp server, ``websockets`` client playing Asterisk
prompts in real time, pacing, marks, barge-in, protocol errors, admission.
"""

from __future__ import annotations

import asyncio
import base64
import json
import time

import aiohttp
import numpy as np
import pytest

from agent.admission import AdmissionGate
from agent.config import AdmissionConfig
from testkit.phone_prompts import pcm8k, speech_onset_s, to_16k
from tests.phone.pacing_watch import PacingWatch
from tests.phone.parrot import parrot_server
from transports.phone.loopback_caller import LoopbackCaller
from transports.phone.options import PhoneOptions

REPLY = "cannot-complete-as-dialed"  # the bot's answer, 2.64 s
LEAD_S = PhoneOptions().lead_ms / 1000.0


def gate(sessions: int = 2) -> AdmissionGate:
    return AdmissionGate(AdmissionConfig(max_sessions=sessions, queue_size=0, queue_timeout_s=0.1))


async def settled(endpoint, admission: AdmissionGate | None = None, timeout_s: float = 3.0) -> bool:
    """No call left on the endpoint and every gate slot handed back."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not endpoint.active and (admission is None or admission.active == 0):
            return True
        await asyncio.sleep(0.05)
    return False


async def test_reply_is_paced_in_real_time_with_marks():
    """A reply from a TTS faster than real time goes out in real time, with marks, and the caller's
    playout never runs dry: no underrun, unless the event loop itself stalled while it was dry."""
    async with PacingWatch() as watch, parrot_server(to_16k(pcm8k(REPLY))) as (url, endpoint):
        caller = await LoopbackCaller(url).connect()
        eos = (await caller.say(pcm8k("auth-thankyou"))).last
        reply = await caller.wait_reply(eos, timeout_s=10)
        assert reply is not None, "no reply"
        await asyncio.sleep(0.3)  # the end mark's echo
        media = [(at, p) for at, p in caller.inbound.media if at >= eos]
        assert {len(p) for _, p in media} == {160}, "every media message is 20 ms of 8 kHz mu-law"
        arrivals = np.array([at for at, _ in media]) - media[0][0]
        slots = np.arange(len(media)) * 0.02
        ahead = (slots - arrivals).max()
        assert ahead <= LEAD_S + 0.03, f"sent {ahead * 1000:.0f} ms ahead of real time (lead {LEAD_S * 1000:.0f} ms)"
        span = arrivals[-1] + 0.02
        duration = len(media) * 0.02
        assert duration == pytest.approx(2.64, abs=0.1)
        # Real time: the whole reply takes its own length on the wire, less the lead (a loaded
        # box may stall a little; a missing pacer would send it all in a few milliseconds).
        assert duration - LEAD_S - 0.03 <= span <= duration + 0.3, (span, duration)
        names = [n for _, n in caller.inbound.marks]
        assert names[-1].endswith("-end") and len(names) >= 5
        assert sorted(n for _, n in caller.inbound.echoed) == sorted(names)
        await caller.hang_up()
        assert await settled(endpoint)
        record = endpoint.recent[-1]
        assert (record.close_code, record.close_reason) == (1000, "stream stopped")
        assert record.replies[0].complete and record.replies[0].heard_ms == record.replies[0].sent_ms
        stats = record.stats.as_dict()
        assert stats["chunks_out"] == len(media)
        assert stats["output_pacer_lateness_ms"]["p50"] < 5.0
    assert stats["underruns"] == len(watch.underruns), watch.describe()  # this call's, counted as they happened
    assert not watch.unexplained, f"the caller ran dry in steady playback: {watch.describe()}"


def playout_gaps(arrivals: list[float], chunk_s: float = 0.02) -> list[tuple[int, float]]:
    """(chunk index, seconds of silence before it) wherever the caller's playout buffer ran dry."""
    gaps, play_end = [], None
    for i, at in enumerate(arrivals):
        if play_end is not None and at > play_end:
            gaps.append((i, at - play_end))
        play_end = (at if play_end is None else max(play_end, at)) + chunk_s
    return gaps


async def test_a_tts_stall_mid_reply_is_an_underrun_where_the_caller_hears_it_then_pacing_resumes():
    """A behaviour, not a timing: the TTS stalls 300 ms once 0.2 s of the reply is out, so the far end
    must run dry early in the reply; the transport must count that underrun (the gap it reports is the
    one the caller's playout buffer had), send nothing twice or early, and go on in real time."""
    async with PacingWatch() as watch, parrot_server(to_16k(pcm8k(REPLY)), stall=(0.2, 0.3)) as (url, endpoint):
        caller = await LoopbackCaller(url).connect()
        eos = (await caller.say(pcm8k("auth-thankyou"))).last
        assert await caller.wait_reply(eos, timeout_s=10) is not None, "no reply"
        await asyncio.sleep(0.3)
        media = [(at, p) for at, p in caller.inbound.media if at >= eos]
        arrivals = [at for at, _ in media]
        await caller.hang_up()
        assert await settled(endpoint)
        stats = endpoint.recent[-1].stats.as_dict()
    assert len(media) * 0.02 == pytest.approx(2.64, abs=0.1)  # all of it, once
    heard = playout_gaps(arrivals)
    big = [(i, gap) for i, gap in heard if gap >= 0.05]
    assert big, f"the caller never ran dry: {heard}"
    index, gap = max(big, key=lambda x: x[1])
    assert 1 <= index <= 15, f"the gap came at chunk {index}, not early in the reply where the TTS stalled"
    assert 0.05 <= gap <= 0.35, gap  # 0.3 s stall less the audio buffered ahead of it
    assert stats["underruns"] >= 1
    assert max(stats["output_underrun_gap_ms"]["max"], 0) / 1000.0 == pytest.approx(gap, abs=0.05)
    assert stats["underruns"] == len(watch.underruns), watch.describe()
    assert len(watch.unexplained) <= 1, f"underruns besides the TTS stall: {watch.describe()}"
    after = np.array(arrivals[index:]) - arrivals[index]
    duration = (len(arrivals) - index) * 0.02
    assert duration - LEAD_S - 0.05 <= after[-1] + 0.02 <= duration + 0.3  # real time again, not a burst


async def test_barge_in_clears_within_200_ms_and_the_caller_hears_no_more():
    async with parrot_server(to_16k(pcm8k(REPLY))) as (url, endpoint):
        caller = await LoopbackCaller(url).connect()
        eos = (await caller.say(pcm8k("auth-thankyou"))).last
        for _ in range(200):
            first = caller.first_voiced_after(eos)
            if first is not None:
                break
            await asyncio.sleep(0.02)
        assert first is not None, "no reply"
        await asyncio.sleep(0.6)
        interruption = pcm8k("hello-world")
        spoken = await caller.say(interruption)
        onset, sent_last = spoken.started(speech_onset_s(interruption)), spoken.last
        clears = [t for t in caller.inbound.clears if t > first]
        assert clears, "no clear"
        latency = clears[0] - onset
        assert 0 < latency < 0.2, f"clear {latency * 1000:.0f} ms after the caller started speaking"
        assert not [at for at, _ in caller.inbound.media if clears[0] < at < sent_last], "old reply kept playing"
        silent = caller.speech_heard_until(first, sent_last)  # the caller's playout model: clear drops the rest
        assert silent is not None and 0 < silent - onset < 0.2, "the bot went on talking over the caller"
        await caller.hang_up()
        assert await settled(endpoint)
        record = endpoint.recent[-1]
        first_reply = record.replies[0]
        assert first_reply.cleared and not first_reply.complete and first_reply.heard_ms < first_reply.sent_ms
        assert record.stats.barge_in_resumed == 0 and record.stats.barge_in_ms[0] < 200


async def test_a_noise_burst_pauses_the_bot_briefly_then_it_resumes():
    async with parrot_server(to_16k(pcm8k(REPLY))) as (url, endpoint):
        caller = await LoopbackCaller(url).connect()
        await caller.say(pcm8k("auth-thankyou"))
        await asyncio.sleep(1.2)
        burst = (np.random.default_rng(1).normal(0, 6000, 800)).astype("<i2").tobytes()  # 100 ms
        await caller.say(burst)
        await asyncio.sleep(2.5)
        await caller.hang_up()
        assert await settled(endpoint)
        stats = endpoint.recent[-1].stats
        assert stats.clears == 1 and stats.barge_in_resumed == 1
        clear = caller.inbound.clears[0]
        assert [at for at, _ in caller.inbound.media if at > clear + 0.5], "playback did not resume"


@pytest.mark.parametrize("bad, code, words", [
    ('{"event": "media", "media": {', 1007, "malformed JSON"),
    (json.dumps({"event": "hangup"}), 1003, "unknown event 'hangup'"),
    (json.dumps({"event": "media", "media": {"payload": base64.b64encode(b"\xff" * 4000).decode()}}), 1007,
     "media payload of 4000 bytes"),
    (json.dumps({"event": "media", "media": {"payload": ""}}), 1007, "media payload of 0 bytes"),
    (b"\x7f\x00binary", 1003, "binary frames"),
    (json.dumps({"event": "media", "streamSid": "MZother",
                 "media": {"payload": base64.b64encode(b"\xff" * 160).decode()}}), 1008, "for stream 'MZother'"),
])
async def test_protocol_errors_close_with_a_reason_and_leave_nothing(bad, code, words):
    admission = gate()
    async with parrot_server(b"\x00" * 3200, gate=admission) as (url, endpoint):
        caller = await LoopbackCaller(url).connect()
        await asyncio.sleep(0.3)
        await caller.send(bad)
        assert await caller.wait_closed(3.0)
        assert caller.close_code == code and words in caller.close_reason, (caller.close_code, caller.close_reason)
        assert await settled(endpoint, admission), "a session was left behind"
        assert endpoint.recent[-1].close_code == code
        await caller.close()


@pytest.mark.parametrize("first, code, words", [
    ({"event": "media", "media": {"payload": "/w=="}}, 1008, "'media' before 'start'"),
    ({"event": "start", "start": {"streamSid": "MZ1", "mediaFormat": {
        "encoding": "audio/x-l16", "sampleRate": 16000, "channels": 1}}}, 1003, "unsupported mediaFormat"),
    (None, 1008, "no 'start' event within 0.5 s"),
])
async def test_handshake_errors(first, code, words):
    admission = gate()
    async with parrot_server(b"", gate=admission, options=PhoneOptions(handshake_timeout_s=0.5)) as (url, endpoint):
        caller = await LoopbackCaller(url).connect(handshake=False, stream=False)
        if first is not None:
            await caller.send(first)
        assert await caller.wait_closed(3.0)
        assert caller.close_code == code and words in caller.close_reason, (caller.close_code, caller.close_reason)
        assert await settled(endpoint, admission)
        assert not endpoint.recent, "no call was ever started"
        await caller.close()


async def test_a_socket_dropped_mid_call_leaves_nothing_behind():
    admission = gate()
    async with parrot_server(to_16k(pcm8k(REPLY)), gate=admission) as (url, endpoint):
        caller = await LoopbackCaller(url).connect()
        await caller.say(pcm8k("auth-thankyou"))
        await asyncio.sleep(0.5)  # mid-reply
        assert endpoint.active and admission.active == 1
        await caller.drop()
        assert await settled(endpoint, admission), "the dropped call's session is still alive"
        record = endpoint.recent[-1]
        assert record.closed_by_peer and record.close_code == 1006


async def test_a_silent_stream_is_dropped_after_the_idle_timeout():
    admission = gate()
    async with parrot_server(b"", gate=admission, options=PhoneOptions(idle_timeout_s=0.5)) as (url, endpoint):
        caller = await LoopbackCaller(url).connect(stream=False)
        assert await caller.wait_closed(5.0)
        assert caller.close_code == 1008 and "no message for 0.5 s" in caller.close_reason
        assert await settled(endpoint, admission)


async def test_admission_refuses_with_1013_and_admits_again_when_free():
    admission = gate(sessions=1)
    async with parrot_server(b"", gate=admission) as (url, endpoint):
        first = await LoopbackCaller(url).connect()
        await asyncio.sleep(0.3)
        second = await LoopbackCaller(url).connect()
        assert await second.wait_closed(3.0)
        assert second.close_code == 1013 and "refused: at capacity" in second.close_reason
        assert "retry after 5 s" in second.close_reason
        await first.hang_up()
        assert await settled(endpoint, admission)
        third = await LoopbackCaller(url).connect()
        await asyncio.sleep(0.3)
        assert third.stream_sid in endpoint.active
        await third.hang_up()
        assert await settled(endpoint, admission)
        await second.close()


async def test_dtmf_and_twiml():
    async with parrot_server(b"", options=PhoneOptions(trust_forwarded_headers=True)) as (url, endpoint):
        caller = await LoopbackCaller(url).connect()
        for digit in "1#":
            await caller.send({"event": "dtmf", "streamSid": caller.stream_sid,
                               "dtmf": {"track": "inbound_track", "digit": digit}})
        await asyncio.sleep(0.2)
        await caller.hang_up()
        assert await settled(endpoint)
        assert endpoint.recent[-1].stats.dtmf == ["1", "#"]
        http = url.replace("ws://", "http://").replace("/phone/ws", "")
        async with aiohttp.ClientSession() as session:
            headers = {"X-Forwarded-Proto": "https", "X-Forwarded-Host": "bot.example.com"}
            async with session.post(f"{http}/phone/twiml", headers=headers) as r:
                body = await r.text()
            assert r.status == 200 and r.content_type == "application/xml"
            assert '<Connect><Stream url="wss://bot.example.com/phone/ws" /></Connect>' in body
            async with session.get(f"{http}/phone/calls/{caller.stream_sid}") as r:
                assert r.status == 200 and (await r.json())["stats"]["dtmf"] == "1#"


async def test_a_token_keeps_strangers_out():
    admission = gate()
    async with parrot_server(b"", gate=admission, options=PhoneOptions(token="s3cret")) as (url, endpoint):
        stranger = await LoopbackCaller(url).connect()
        assert await stranger.wait_closed(3.0)
        assert stranger.close_code == 1008 and "unauthorized" in stranger.close_reason
        assert await settled(endpoint, admission)
        await stranger.close()
        for caller in (LoopbackCaller(url, custom_parameters={"token": "s3cret"}),
                       LoopbackCaller(url + "?token=s3cret")):
            await caller.connect()
            await asyncio.sleep(0.3)
            assert caller.stream_sid in endpoint.active
            await caller.hang_up()
        assert await settled(endpoint, admission)
        async with aiohttp.ClientSession() as session:
            http = url.replace("ws://", "http://").replace("/phone/ws", "")
            async with session.post(f"{http}/phone/twiml") as r:
                assert r.status == 404  # it would hand out the token
