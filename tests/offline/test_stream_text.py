"""Streamed text in process: deltas equal the transcript's text, failures before and after the first byte.

A fake engine (words named after their window) stands in for a model, so these run in a second.
"""

from __future__ import annotations

import asyncio
import io
import json
import random
import wave

import numpy as np
import pytest
from aiohttp import FormData
from aiohttp.test_utils import TestClient, TestServer

from asr.offline.plan import PlanOptions
from asr.offline.results import Word
from asr.offline.server import TranscriptionServer
from asr.offline.stitch import build_transcript
from asr.offline.text_stream import TextStream
from asr.offline.transcriber import OfflineTranscriber


def test_deltas_rebuild_the_transcript_text_after_every_window() -> None:
    rng = random.Random(7)
    stream, joined, t = TextStream(), "", 0.0
    for _ in range(60):  # windows of words with pauses, sentence ends and words without a leading space
        words = []
        for _ in range(rng.randint(0, 12)):
            t += rng.choice([0.05, 0.1, 0.3, 0.9, 2.0])
            text = rng.choice([" hello", " world.", " ok?", "'s", " a", "-b", " yes!"])
            words.append(Word(t, t + rng.uniform(0.1, 0.5), text))
            t = words[-1].end
        joined += stream.add(words)
        assert joined == stream.sent == build_transcript(stream.words, t, "en").text
    assert joined == stream.transcript(t + 1, "en").text and len(joined) > 500


class FakeEngine:
    """Window ``k`` of a request says ``w<k>a w<k>b``; the window of ``fail_at`` raises."""

    name, sample_rate, max_batch, languages = "fake", 16000, 1, None
    plan = PlanOptions(max_window_s=10.0)

    def __init__(self, fail_at: int | None = None) -> None:
        self.fail_at = fail_at
        self.calls = 0

    def transcribe_windows(self, windows: list[np.ndarray], language: str | None) -> list[list[Word]]:
        out = []
        for _ in windows:
            k = self.calls
            self.calls += 1
            if k == self.fail_at:
                raise RuntimeError("engine failure")
            out.append([Word(1.0, 1.4, f" w{k}a"), Word(1.5, 2.0, f" w{k}b.")])
        return out


def bursts(n: int, seconds: float = 9.0) -> bytes:
    """``n`` bursts of noise with 3 s of silence between them: ``n`` windows of up to 10 s."""
    rng = np.random.default_rng(0)
    parts = [np.concatenate([0.2 * rng.standard_normal(int(seconds * 16000)), np.zeros(3 * 16000)]) for _ in range(n)]
    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(16000)
        w.writeframes((np.clip(np.concatenate(parts), -1, 1) * 32767).astype("<i2").tobytes())
    return buf.getvalue()


async def post(engine: FakeEngine, **fields: str) -> tuple[int, str, str]:
    server = TranscriptionServer(OfflineTranscriber(engine))  # type: ignore[arg-type]
    async with TestClient(TestServer(server.app())) as client:
        form = FormData()
        form.add_field("file", bursts(4), filename="b.wav", content_type="audio/wav")
        form.add_field("model", "fake")
        for k, v in fields.items():
            form.add_field(k, v)
        resp = await client.post("/v1/audio/transcriptions", data=form)
        return resp.status, resp.headers.get("Content-Type", ""), await resp.text()


def events(body: str) -> list[dict]:
    return [json.loads(line[6:]) for line in body.splitlines() if line.startswith("data: ")]


def test_one_delta_per_window_then_done() -> None:
    status, ctype, body = asyncio.run(post(FakeEngine(), stream="true"))
    assert status == 200 and ctype.startswith("text/event-stream")
    evs = events(body)
    assert [e["type"] for e in evs] == ["transcript.text.delta"] * 4 + ["transcript.text.done"]
    assert [e["delta"] for e in evs[:4]] == ["w0a w0b.", " w1a w1b.", " w2a w2b.", " w3a w3b."]
    assert evs[-1]["text"] == "w0a w0b. w1a w1b. w2a w2b. w3a w3b."
    status, _, plain = asyncio.run(post(FakeEngine(), response_format="text"))
    assert status == 200 and plain == evs[-1]["text"] + "\n"


def test_a_failure_before_the_first_delta_is_a_json_500() -> None:
    status, ctype, body = asyncio.run(post(FakeEngine(fail_at=0), stream="true"))
    assert status == 500 and ctype.startswith("application/json")
    assert json.loads(body)["error"]["type"] == "server_error"


def test_a_failure_after_the_first_delta_is_an_error_event() -> None:
    status, _, body = asyncio.run(post(FakeEngine(fail_at=2), stream="true"))
    evs = events(body)
    assert status == 200 and [e.get("type") for e in evs] == ["transcript.text.delta"] * 2 + ["error"]
    assert evs[-1]["error"]["type"] == "server_error"


@pytest.mark.parametrize("fmt", ["srt", "vtt", "verbose_json"])
def test_stream_needs_json_or_text(fmt: str) -> None:
    status, ctype, body = asyncio.run(post(FakeEngine(), stream="true", response_format=fmt))
    error = json.loads(body)["error"]
    assert status == 400 and ctype.startswith("application/json")
    assert error["param"] == "stream" and fmt in error["message"]


def test_bad_stream_value() -> None:
    status, _, body = asyncio.run(post(FakeEngine(), stream="maybe"))
    assert status == 400 and json.loads(body)["error"]["param"] == "stream"
