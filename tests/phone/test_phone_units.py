"""Protocol parsing, the playout clock, marks, barge-in onset and inbound decoding, in isolation."""

from __future__ import annotations

import base64
import json

import numpy as np
import pytest

from transports.phone.barge_in import BargeInDetector
from transports.phone.codec import InboundDecoder, encode_ulaw
from transports.phone.marks import MarkLedger
from transports.phone.pacing import PlayoutClock
from transports.phone.protocol import (
    CLOSE_INVALID_PAYLOAD,
    CLOSE_UNSUPPORTED,
    ProtocolError,
    parse_message,
)


def media(payload: bytes, **extra) -> str:
    return json.dumps({"event": "media", "streamSid": "MZ1",
                       "media": {"track": "inbound", "payload": base64.b64encode(payload).decode(), **extra}})


def test_parses_start_and_media():
    start = parse_message(json.dumps({"event": "start", "start": {
        "streamSid": "MZ1", "callSid": "CA1", "tracks": ["inbound"], "customParameters": {"who": "me"},
        "mediaFormat": {"encoding": "audio/x-mulaw", "sampleRate": 8000, "channels": 1}}}))
    assert start.start is not None and start.start.stream_sid == "MZ1" and start.stream_sid == "MZ1"
    assert start.start.custom_parameters == {"who": "me"}
    msg = parse_message(media(b"\xff" * 160))
    assert msg.event == "media" and msg.payload == b"\xff" * 160 and msg.stream_sid == "MZ1"


@pytest.mark.parametrize("data, code, words", [
    ("{not json", CLOSE_INVALID_PAYLOAD, "malformed JSON"),
    ("[1, 2]", CLOSE_INVALID_PAYLOAD, "JSON object"),
    ('{"event": "hangup"}', CLOSE_UNSUPPORTED, "unknown event 'hangup'"),
    ('{"no": "event"}', CLOSE_INVALID_PAYLOAD, "no 'event'"),
    (b"\x00\x01", CLOSE_UNSUPPORTED, "binary frames"),
    (media(b""), CLOSE_INVALID_PAYLOAD, "0 bytes"),
    (media(b"\xff" * 1601), CLOSE_INVALID_PAYLOAD, "1601 bytes"),
    ('{"event": "media", "media": {"payload": "@@@"}}', CLOSE_INVALID_PAYLOAD, "not valid base64"),
    ('{"event": "media", "media": "x"}', CLOSE_INVALID_PAYLOAD, "'media' must be"),
    ('{"event": "start", "start": {"streamSid": "MZ1", "mediaFormat": {"encoding": "audio/l16", '
     '"sampleRate": 16000, "channels": 1}}}', CLOSE_UNSUPPORTED, "unsupported mediaFormat"),
    ('{"event": "mark", "mark": {}}', CLOSE_INVALID_PAYLOAD, "mark.name"),
])
def test_rejects_what_breaks_the_protocol(data, code, words):
    with pytest.raises(ProtocolError) as info:
        parse_message(data)
    assert info.value.code == code
    assert words in info.value.reason
    assert len(info.value.close_reason()) <= 123


def test_clock_keeps_the_lead_and_measures_lateness():
    clock = PlayoutClock(lead_s=0.08)
    t = 100.0
    first = clock.sent(t, 0.02, clock.due(t))
    assert first.first and first.lateness_s == 0
    for _ in range(4):  # the lead fills at once
        assert clock.due(t) == t
        clock.sent(t, 0.02, clock.due(t))
    assert clock.due(t) == pytest.approx(t + 0.02)  # from here on: one chunk per 20 ms
    due = clock.due(t)
    late = clock.sent(due + 0.03, 0.02, due, ready=due - 0.01)  # our own 30 ms stall: late, no gap
    assert late.lateness_s == pytest.approx(0.03) and late.pacer_s == pytest.approx(0.03) and late.gap_s == 0
    due = clock.due(t)
    starved = clock.sent(due + 0.2, 0.02, due, ready=due + 0.2)  # TTS 200 ms behind: the far end ran dry
    assert starved.lateness_s == pytest.approx(0.2) and starved.pacer_s == 0
    assert starved.gap_s == pytest.approx(0.2 - 0.08, abs=1e-6)  # lateness beyond the lead is heard
    assert clock.playing(due + 0.2)
    assert clock.clear(due + 0.2) == pytest.approx(0.02)
    assert not clock.playing(due + 0.2)


def test_the_caller_hears_speech_until_its_playout_runs_out_or_a_clear_drops_it():
    from transports.phone.loopback_caller import LoopbackCaller

    loud = encode_ulaw((np.sin(np.arange(160) / 3.0) * 8000).astype("<i2").tobytes())
    quiet = encode_ulaw(bytes(320))
    caller = LoopbackCaller("ws://unused")
    # five voiced chunks arrive in a 30 ms burst at t=10 (100 ms of audio), then silence at 10.2
    caller.inbound.media += [(10.0 + 0.006 * i, loud) for i in range(5)] + [(10.2, quiet)]
    assert caller.speech_heard_until(9.0, 11.0) == pytest.approx(10.1)  # played back to back from 10.0
    assert caller.speech_heard_until(10.1, 11.0) is None  # nothing voiced arrived in that window
    caller.inbound.clears.append(10.05)  # clear halfway: the rest was never played
    assert caller.speech_heard_until(9.0, 11.0) == pytest.approx(10.05)


def test_marks_tell_what_was_heard():
    ledger = MarkLedger(every_ms=100)
    names = [ledger.on_audio(20) for _ in range(10)]
    sent = [n for n in names if n]
    assert sent == ["r0-100", "r0-200"]
    end = ledger.end_reply()
    assert end == "r0-200-end"
    ledger.on_echo("r0-100")
    assert ledger.replies[0].heard_ms == 100 and not ledger.replies[0].complete
    ledger.on_echo(end)
    assert ledger.replies[0].complete and ledger.replies[0].heard_ms == 200
    for _ in range(10):
        ledger.on_audio(20)
    ledger.on_clear(buffered_ms=80)  # the caller heard 120 of 200 ms
    assert ledger.on_echo("r1-100") is not None  # echoed by the clear: dropped, not heard
    assert ledger.replies[1].cleared and ledger.replies[1].heard_ms == pytest.approx(120)
    assert ledger.on_echo("never-sent") is None


def test_barge_in_onset_is_fast_and_ignores_clicks_and_steady_noise():
    rng = np.random.default_rng(0)
    det = BargeInDetector(start_ms=60)
    quiet = (rng.normal(0, 30, 160)).astype("<i2").tobytes()
    loud = (rng.normal(0, 4000, 160)).astype("<i2").tobytes()
    t = 0.0
    for _ in range(50):
        t += 0.02
        assert not det.feed(quiet, t)
    assert not det.feed(loud, t + 0.02)  # a 20 ms click
    assert not det.feed(quiet, t + 0.04)
    hits = [det.feed(loud, t + 0.06 + 0.02 * i) for i in range(5)]
    assert hits == [False, False, True, False, False]  # confirmed on the 3rd chunk, once
    assert det.onset == pytest.approx(t + 0.06 - 0.02)
    noisy = BargeInDetector(start_ms=60)
    hum = (rng.normal(0, 1500, 160)).astype("<i2").tobytes()
    fired = [noisy.feed(hum, 0.02 * i) for i in range(500)]  # 10 s of steady line noise
    assert not any(fired[200:])  # the noise floor rose to it


async def test_inbound_decoding_resamples_once_per_chunk_and_keeps_the_tone():
    dec = InboundDecoder(16000)
    t = np.arange(8000) / 8000.0
    tone = (np.sin(2 * np.pi * 440 * t) * 8000).astype("<i2").tobytes()
    out = []
    for i in range(0, len(tone), 320):
        pcm8k, pcm16k = await dec.decode(encode_ulaw(tone[i:i + 320]))
        assert len(pcm8k) == 320
        out.append(pcm16k)
    audio = np.frombuffer(b"".join(out), "<i2").astype(np.float32)
    assert len(audio) == 16000  # polyphase: nothing held back (soxr's stream holds 50-66 ms)
    spectrum = np.abs(np.fft.rfft(audio[1000:]))
    assert np.fft.rfftfreq(15000, 1 / 16000)[np.argmax(spectrum)] == pytest.approx(440, abs=2)
    level = np.sqrt(np.mean(audio[1000:] ** 2))
    assert level == pytest.approx(8000 / np.sqrt(2), rel=0.05)  # unity gain through mu-law + FIR
    images = spectrum[np.fft.rfftfreq(15000, 1 / 16000) > 4500].max() / spectrum.max()
    assert images < 10 ** (-50 / 20)  # the 8 kHz images are filtered out


def test_options_come_from_the_config_section_then_the_environment():
    from dataclasses import dataclass

    from agent.phone_routes import options_from_config

    @dataclass
    class Config:
        phone: dict

    opts = options_from_config(Config({"lead_ms": 60.0}), {"CADENCE_PHONE_OPTIONS": '{"barge_in_start_ms": 0}'})
    assert opts.lead_ms == 60.0 and opts.barge_in_start_ms == 0
    assert options_from_config(object(), {}).lead_ms == 80.0
    with pytest.raises(ValueError, match="unknown keys"):
        options_from_config(object(), {"CADENCE_PHONE_OPTIONS": '{"leed_ms": 1}'})


def test_a_response_that_stalls_keeps_its_name_across_its_spurts():
    """A response whose audio stalled long enough for the bot to stop speaking (two spurts) is one reply to the
    caller's marks: the second spurt's marks carry the same response and count on from the first's milliseconds.
    A new TTS context, audio without one, or audio after a clear is a new response."""
    ledger = MarkLedger(every_ms=100)
    names = [ledger.on_audio(20, "ctx-a") for _ in range(5)]
    assert [n for n in names if n] == ["r0-100"]
    assert ledger.end_reply() == "r0-100-end"  # the stall: pipecat's bot stopped speaking
    names = [ledger.on_audio(20, "ctx-a") for _ in range(5)]
    assert [n for n in names if n] == ["r0-200"] and ledger.end_reply() == "r0-200-end"
    assert [(r.index, r.response) for r in ledger.replies] == [(0, 0), (1, 0)]
    ledger.on_echo("r0-200-end")
    assert ledger.replies[1].complete and ledger.replies[1].heard_ms == 100  # heard within its own spurt
    names = [ledger.on_audio(20, "ctx-b") for _ in range(5)]
    assert [n for n in names if n] == ["r1-100"]
    ledger.on_clear(buffered_ms=0)
    names = [ledger.on_audio(20, "ctx-b") for _ in range(5)]  # after a clear: a new response
    assert [n for n in names if n] == ["r2-100"]
    ledger.end_reply()
    assert [n for n in (ledger.on_audio(100, None), ledger.on_audio(100, None)) if n] == ["r3-100", "r3-200"]
    ledger.end_reply()
    assert ledger.on_audio(100, None) == "r4-100"  # no context: every spurt its own response, as before


def test_a_reply_names_the_end_of_the_turn_it_answers():
    """A new response takes what ended the call's latest turn (once) into its marks' names; a stalled response's
    later spurt keeps it, and a response with no turn end in hand (the greeting) names none."""
    from agent.turn_ends import TurnEndNote

    note = TurnEndNote()
    ledger = MarkLedger(every_ms=100, turn_end=note.take)
    assert [n for n in (ledger.on_audio(100, "greeting"),) if n] == ["r0-100"]  # no turn has ended yet
    ledger.end_reply()
    note.note("silence")  # the turn model judged the turn unfinished; its silence fallback ended it
    assert ledger.on_audio(100, "ctx-a") == "r1-silence-100"
    assert ledger.end_reply() == "r1-silence-100-end"
    assert note.by is None  # taken: a later reply without a new turn end names none
    assert ledger.on_audio(100, "ctx-a") == "r1-silence-200"  # the same response after a stall keeps it
    ledger.end_reply()
    note.note("model")
    assert ledger.on_audio(100, "ctx-b") == "r2-model-100"
    assert ledger.replies[-1].as_dict()["turn_end"] == "model"
