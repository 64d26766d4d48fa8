"""Phone calls against a real ``cadence serve`` with the embedded models (Whisper tiny.en,
SmolLM2 on llama.cpp, Piper), from a real WebSocket client speaking Twilio's protocol in real time.
"""

from __future__ import annotations

import asyncio
import base64
import json
import time

import aiohttp
import numpy as np
import pytest

from testkit.corpus import normalize, wer
from testkit.phone_prompts import pcm8k, prompt, speech_onset_s
from transports.phone.loopback_caller import LoopbackCaller
from transports.phone.options import PhoneOptions

pytestmark = pytest.mark.slow

# Offline, Whisper tiny.en transcribes these three prompts through the same mu-law round trip
# without a single error (and 9.7% WER over 40 random Asterisk prompts). Live, VAD cuts the
# segments, and one lost edge word in a 7-word prompt is 14%: so each turn may reach 30%, the
# mean must stay under 15%.
CONVERSATION = ["agent-pass", "cannot-complete-as-dialed", "check-number-dial-again"]
TURN_WER_MAX = 0.30
MEAN_WER_MAX = 0.15
LEAD_S = PhoneOptions().lead_ms / 1000.0


@pytest.fixture
def server(phone_server):
    """The package's ``cadence serve`` (tests/phone/conftest.py), shared with the capacity run."""
    return phone_server


async def get_json(url: str) -> dict:
    async with aiohttp.ClientSession() as http, http.get(url) as r:
        return await r.json()


async def nothing_left(url: str, timeout_s: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        calls, health = await get_json(f"{url}/phone/calls"), await get_json(f"{url}/health")
        if not calls["active"] and health["sessions"] == 0:
            return True
        await asyncio.sleep(0.1)
    return False


def check_paced(media: list[tuple[float, bytes]]) -> None:
    """A reply's media: 20 ms messages, and the caller's playout buffer never holds more than the lead."""
    assert media and {len(p) for _, p in media} == {160}
    play_end, most = 0.0, 0.0
    for at, _ in media:
        most = max(most, play_end - at)  # audio still queued at the far end when this chunk arrives
        play_end = max(play_end, at) + 0.02
    # 40 ms of slack for the client's own receive-loop stalls (without pacing it would be seconds).
    assert most <= LEAD_S + 0.04, f"the far end held {most * 1000:.0f} ms: sent faster than real time"


def transcribe_8k(pcm: bytes) -> str:
    """What a listener makes of the bot's phone audio (Whisper tiny.en, as the server uses)."""
    import soxr
    from faster_whisper import WhisperModel

    from agent.models import whisper_model_dir

    model = WhisperModel(str(whisper_model_dir()), device="cpu", compute_type="int8", cpu_threads=1)
    audio = soxr.resample(np.frombuffer(pcm, "<i2").astype(np.float32) / 32768.0, 8000, 16000)
    segments, _ = model.transcribe(audio, language="en", beam_size=1, condition_on_previous_text=False)
    return " ".join(s.text for s in segments)


def heard_fraction(said: str, heard: str) -> float:
    """Share of the words said that a listener heard (word bag: digit formatting varies)."""
    said_words, heard_words = normalize(said).split(), set(normalize(heard).split())
    return sum(w in heard_words for w in said_words) / max(1, len(said_words))


async def test_a_call_is_transcribed_answered_and_paced(server):
    caller = await LoopbackCaller(server["ws"]).connect()
    await asyncio.sleep(0.5)
    replies = []
    for name in CONVERSATION:
        eos = (await caller.say(pcm8k(name))).last
        reply = await caller.wait_reply(eos, timeout_s=20)
        assert reply is not None, f"no spoken reply to {name!r}"
        check_paced([(at, p) for at, p in caller.inbound.media if reply[0] - 0.01 <= at <= reply[1]])
        replies.append(caller.audio_between(reply[0] - 0.1, reply[1] + 0.1))
    call = await get_json(f"{server['url']}/phone/calls/{caller.stream_sid}")
    await caller.hang_up()
    turns = [t for t in call["turns"] if t["transcript"]]
    assert len(turns) == len(CONVERSATION), [t["transcript"] for t in call["turns"]]
    scores = [wer(prompt(n).text, t["transcript"]) for n, t in zip(CONVERSATION, turns, strict=True)]
    assert max(scores) <= TURN_WER_MAX and sum(scores) / len(scores) <= MEAN_WER_MAX, (
        scores, [t["transcript"] for t in turns])
    assert all(t["reply"] for t in turns), "every turn is answered"
    said = " ".join(t["reply"] for t in turns)
    heard = await asyncio.to_thread(transcribe_8k, b"".join(replies))
    assert heard_fraction(said, heard) >= 0.6, (said, heard)  # the mu-law audio is the bot's words
    stats = call["stats"]
    assert stats["marks_echoed"] == stats["marks_sent"] > 0
    assert all(r["complete"] for r in call["replies"]), call["replies"]  # the caller heard every reply
    lateness = stats["output_chunk_lateness_ms"]
    print(f"\nphone e2e: lateness p50 {lateness['p50']:.1f} ms p99 {lateness['p99']:.1f} ms "
          f"max {lateness['max']:.1f} ms over {lateness['n']} chunks; underruns {stats['underruns']}")
    assert lateness["p50"] < 10.0
    assert await nothing_left(server["url"])
    # a call imports nothing the GC freeze left out (agent.runtime.preload_call_modules): each module imported
    # after it would be walked by every full collection for the process's life
    async with aiohttp.ClientSession() as http, http.get(f"{server['url']}/metrics") as r:
        metrics = await r.text()
    late = [line for line in metrics.splitlines() if line.startswith("cadence_modules_after_gc_freeze ")]
    assert late == ["cadence_modules_after_gc_freeze 0.0"], late or metrics[:2000]
    # at the hang-up the call's turns were logged as one JSON line, in order, with the events bench/turn_tail.py
    # joins on the callers' records (server.log_call_turns)
    logged = [line for line in server["log"] if f"session phone-{caller.stream_sid}: turns [" in line]
    assert len(logged) == 1, logged
    turns = [t for t in json.loads(logged[0].split(": turns ", 1)[1]) if "vad_stop" in t["at"]]
    assert len(turns) >= len(CONVERSATION), turns
    stops = [t["at"]["vad_stop"] for t in turns]
    assert stops == sorted(stops)
    assert all(t["at"]["vad_stop"] < t["at"]["tts_start"] < t["at"]["first_audio_out"] for t in turns[:3]), turns


async def test_barge_in_sends_clear_within_200_ms(server):
    caller = await LoopbackCaller(server["ws"]).connect()
    await asyncio.sleep(0.5)
    eos = (await caller.say(pcm8k("agent-pass"))).last
    deadline = time.monotonic() + 20
    while (first := caller.first_voiced_after(eos)) is None and time.monotonic() < deadline:
        await asyncio.sleep(0.02)
    assert first is not None, "no reply to barge in on"
    await asyncio.sleep(0.3)
    speech = pcm8k("hello-world")
    spoken = await caller.say(speech)
    onset, sent_last = spoken.started(speech_onset_s(speech)), spoken.last
    clears = [t for t in caller.inbound.clears if t > first]
    assert clears, "the caller spoke over the bot and got no clear"
    latency = clears[0] - onset
    print(f"\nphone e2e: barge-in clear {latency * 1000:.0f} ms after the caller started speaking")
    assert 0 < latency < 0.2
    assert not [at for at, _ in caller.inbound.media if clears[0] < at < sent_last], "the old reply kept playing"
    assert await caller.wait_reply(sent_last, timeout_s=20) is not None, "no answer after the barge-in"
    call = await get_json(f"{server['url']}/phone/calls/{caller.stream_sid}")
    await caller.hang_up()
    assert call["replies"][0]["cleared"] and not call["replies"][0]["complete"]
    assert call["turns"][0]["interrupted"]
    assert await nothing_left(server["url"])


@pytest.mark.parametrize("bad, code, words", [
    ('{"event": "media", "media": {"payload"', 1007, "malformed JSON"),
    (json.dumps({"event": "transfer"}), 1003, "unknown event 'transfer'"),
    (json.dumps({"event": "media", "media": {"payload": base64.b64encode(b"\xff" * 2000).decode()}}), 1007,
     "media payload of 2000 bytes"),
    ("drop", 1006, ""),
])
async def test_bad_messages_and_drops_end_the_call_cleanly(server, bad, code, words):
    caller = await LoopbackCaller(server["ws"]).connect()
    await caller.say(pcm8k("auth-thankyou"))
    if bad == "drop":
        await caller.drop()
    else:
        await caller.send(bad)
        assert await caller.wait_closed(5.0)
        assert caller.close_code == code and words in caller.close_reason, (caller.close_code, caller.close_reason)
        await caller.close()
    assert await nothing_left(server["url"]), "a session was left behind"
    call = await get_json(f"{server['url']}/phone/calls/{caller.stream_sid}")
    assert call["close_code"] == code and not call["active"]
