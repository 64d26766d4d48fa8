"""A real aiortc peer talks to a real ``cadence serve`` (embedded models) over loopback WebRTC
(both ends offer only 127.0.0.1 as ICE host candidate: ``server.webrtc_ice_hosts``)."""

from __future__ import annotations

import asyncio
import time
from urllib.parse import quote

import aiohttp
import numpy as np
import pytest

from testkit.corpus import pick, wer
from transports.audio_io import load_audio
from transports.webrtc_client import WebRTCCaller

# Whisper tiny.en scores ~6-8% WER on this corpus overall (MODELS.md); single short prompts
# swing more (one wrong word in a five-word prompt is 20%), so each turn may reach 35% and
# the mean over the turns must stay under 20%.
TURN_WER_MAX = 0.35
MEAN_WER_MAX = 0.20


@pytest.fixture
def server(webrtc_server):
    """The session's loopback-ICE ``cadence serve`` (tests/conftest.py), shared with the browser-page tests."""
    return webrtc_server


async def _turns(caller: WebRTCCaller, url: str, timeout_s: float = 30.0) -> list[dict]:
    async with aiohttp.ClientSession() as http:
        deadline = time.monotonic() + timeout_s
        while True:
            async with http.get(f"{url}/api/sessions/{quote(caller.pc_id, safe='')}") as r:
                data = await r.json()
            done = [t for t in data.get("turns", []) if t["transcript"] and t["reply"]]
            if done or time.monotonic() > deadline:
                return data.get("turns", [])
            await asyncio.sleep(0.2)


async def _say_and_wait_reply(caller: WebRTCCaller, audio: np.ndarray, timeout_s: float = 25.0) -> float:
    """Say one utterance; return the arrival time of the bot's first voiced audio after it."""
    caller.say(audio)
    await asyncio.wait_for(caller.mic.idle.wait(), timeout=60)
    eos = caller.mic.speech_end_times[-1]
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        at = caller.received.voiced_after(eos)
        if at is not None:
            return at - eos
        await asyncio.sleep(0.05)
    raise AssertionError(f"no bot audio within {timeout_s} s of the end of speech")


async def test_caller_is_heard_and_answered(server):
    prompts = pick(["auth-incorrect", "conf-getpin", "vm-options"])
    url = server["url"]
    caller = WebRTCCaller(url)
    await caller.connect()
    try:
        errors = []
        seen = 0
        for i, prompt in enumerate(prompts):
            latency = await _say_and_wait_reply(caller, load_audio(prompt.path, 16000))
            # Let the bot finish its answer before the next turn.
            await asyncio.sleep(0.5)
            turns = [t for t in await _turns(caller, url) if t["transcript"]]
            assert len(turns) > seen, f"no transcript for utterance {i}: {turns}"
            # A pause mid-utterance may split it into several turns: score all of them.
            heard = " ".join(t["transcript"] for t in turns[seen:])
            seen = len(turns)
            errors.append(wer(prompt.text, heard))
            assert errors[-1] <= TURN_WER_MAX, f"heard {heard!r} for {prompt.text!r}"
            # a stuck reply, not a slow one: latency is bench/webrtc_latency.py's (1.2-2.4 s here alone; 10.6 s
            # once on a CI box shared with a second suite)
            assert latency < 20.0
            if i < len(prompts) - 1:  # wait until the bot's reply audio stops before speaking again
                await _wait_quiet(caller, 1.5, 30.0)  # (after the last turn: ~16 s for nothing)
                seen = len([t for t in await _turns(caller, url, timeout_s=1) if t["transcript"]])
        assert float(np.mean(errors)) <= MEAN_WER_MAX
        reply = caller.received.audio_between(caller.mic.speech_end_times[0], time.monotonic())
        assert reply.size > 0 and int(np.abs(reply).max()) > 1000, "reply audio is silence"
    finally:
        await caller.close()


async def _wait_quiet(caller: WebRTCCaller, quiet_s: float, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        recent = [pcm for at, pcm in caller.received.chunks if at > time.monotonic() - quiet_s]
        if recent and all(int(np.abs(p).max(initial=0)) < 300 for p in recent):
            return
        await asyncio.sleep(0.1)


async def test_page_feed_brings_transcript_reply_and_stage_times(server):
    """The data channel the page opens carries what the bot heard, its reply text and the turn's timings."""
    prompt = pick(["conf-onlyperson"])[0]
    caller = WebRTCCaller(server["url"], data_channel=True)
    await caller.connect()
    try:
        await caller.wait_connected()
        pairs = caller.ice_pairs()
        assert pairs and all(pair == ("127.0.0.1", "127.0.0.1") for pair in pairs), pairs
        caller.say(load_audio(prompt.path, 16000))
        # a hang guard, not a speed bound: the turn message comes once the reply has been played out, and a CI run
        # on a slowed 2-core box took over 40 s to finish the reply (6 s alone)
        deadline = time.monotonic() + 90
        kinds = lambda: {m["type"] for _, m in caller.messages}  # noqa: E731
        while "turn" not in kinds() and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        messages = [m for _, m in caller.messages]
        heard = " ".join(m["text"] for m in messages if m["type"] == "heard")
        assert wer(prompt.text, heard) <= TURN_WER_MAX, messages
        turn = next((m for m in messages if m["type"] == "turn"), None)
        assert turn is not None, f"no turn message in {messages}"
        assert wer(prompt.text, turn["heard"]) <= TURN_WER_MAX
        assert turn["stages_ms"]["eos_to_transcript"] >= 0
        # the admission state: "1/4 sessions", or why new callers are refused on a loaded box
        assert "sessions" in turn["server"] or turn["server"].startswith("overloaded:"), turn["server"]
        said = "".join(m["text"] for m in messages if m["type"] == "bot-text").strip()
        assert said == turn["said"]
    finally:
        await caller.close()


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        ("not json at all", "malformed offer"),
        ('{"type": "offer"}', "'sdp' must be an SDP string"),
        ('{"sdp": "v=0\\r\\nthis is not sdp\\r\\nm=audio", "type": "offer"}', "malformed offer"),
        ('{"sdp": "v=0\\r\\n", "type": "answer"}', "'type' must be 'offer'"),
    ],
)
async def test_malformed_offer_gets_400_and_server_stays_up(server, body, fragment):
    url = server["url"]
    async with aiohttp.ClientSession() as http:
        async with http.get(f"{url}/health") as r:
            before = (await r.json())["sessions"]
        async with http.post(f"{url}/api/offer", data=body, headers={"Content-Type": "application/json"}) as r:
            assert r.status == 400
            assert fragment in (await r.json())["error"]
        async with http.get(f"{url}/health") as r:
            assert r.status == 200
            assert (await r.json())["sessions"] <= before  # nothing left behind


async def test_client_vanishing_mid_sentence_frees_the_session(server):
    url = server["url"]
    caller = WebRTCCaller(url)
    await caller.connect()
    caller.say(load_audio(pick(["vm-options"])[0].path, 16000))
    await asyncio.sleep(1.0)  # mid-sentence
    await caller.close()
    async with aiohttp.ClientSession() as http:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            async with http.get(f"{url}/health") as r:
                if (await r.json())["sessions"] == 0:
                    return
            await asyncio.sleep(0.3)
    raise AssertionError("the vanished caller's session was never released")


def _last_voiced_before(caller: WebRTCCaller, t_end: float, after: float, threshold: int = 300) -> float | None:
    last = None
    for at, pcm in caller.received.chunks:
        if after <= at <= t_end and pcm.size and int(np.abs(pcm).max()) > threshold:
            last = at
    return last


# Barge-in: the caller's first voiced frame -> the last voiced bot frame the caller receives.
# VAD confirms speech ~110-160 ms after onset (vad.start_secs 0.1 plus volume smoothing), then
# the output queue (one 40 ms chunk) is dropped; loopback WebRTC adds a frame or two. Seen: ~260 ms,
# and 323 ms once on a loaded 2-core machine. The bound is for "it stops", not for speed (a bot that
# does not stop talks on through a long answer for seconds); the onset detector's own timing is
# checked exactly in tests/phone/test_phone_units.py, the latency measured by bench/phone_latency.py.
BARGE_IN_MAX_S = 0.45


async def test_caller_talking_over_the_bot_stops_it(server):
    url = server["url"]
    caller = WebRTCCaller(url)
    await caller.connect()
    try:
        long_answer = load_audio(pick(["vm-options"])[0].path, 16000)  # a long prompt: a long answer
        await _say_and_wait_reply(caller, load_audio(pick(["agent-pass"])[0].path, 16000), timeout_s=40)
        await asyncio.sleep(0.4)  # the bot is mid-answer now
        caller.say(long_answer)
        await asyncio.sleep(2.0)
        onset = caller.mic.speech_onset_times[-1]
        last = _last_voiced_before(caller, onset + 2.0, onset)
        assert last is not None, "the bot was not speaking when the caller barged in"
        stopped_after = last - onset
        assert stopped_after <= BARGE_IN_MAX_S, f"the bot kept talking {stopped_after * 1000:.0f} ms"
    finally:
        await caller.close()
