"""The server through the official ``openai`` Python SDK: every format, errors, concurrency, 3 hours."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path

import pytest

from testkit.corpus import wer

openai = pytest.importorskip("openai")


def client(url: str, timeout: float = 120.0):  # type: ignore[no-untyped-def]
    return openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0, timeout=timeout)


def test_every_response_format(server_url: str, prompt_files: list[tuple[Path, str]]) -> None:
    path, text = prompt_files[0]
    c = client(server_url)
    with path.open("rb") as f:
        plain = c.audio.transcriptions.create(model="whisper-1", file=f)
    assert wer(text, plain.text) < 0.2, plain.text
    assert plain.usage is not None and plain.usage.seconds >= 1

    with path.open("rb") as f:
        as_text = c.audio.transcriptions.create(model="whisper-1", file=f, response_format="text")
    assert isinstance(as_text, str) and as_text.strip() == plain.text

    with path.open("rb") as f:
        srt = c.audio.transcriptions.create(model="whisper-1", file=f, response_format="srt")
    assert re.match(r"1\n00:00:\d\d,\d{3} --> 00:00:\d\d,\d{3}\n\S", srt), srt

    with path.open("rb") as f:
        vtt = c.audio.transcriptions.create(model="whisper-1", file=f, response_format="vtt")
    assert vtt.startswith("WEBVTT\n\n00:00:") and " --> " in vtt, vtt

    with path.open("rb") as f:
        verbose = c.audio.transcriptions.create(model="whisper-tiny.en", file=f, response_format="verbose_json",
                                                timestamp_granularities=["word", "segment"], language="en")
    assert verbose.language == "english" and verbose.text == plain.text
    assert verbose.segments and verbose.words
    assert 0.0 <= verbose.segments[0].start < verbose.segments[-1].end <= verbose.duration + 0.05
    starts = [w.start for w in verbose.words]
    assert starts == sorted(starts) and verbose.words[-1].end <= verbose.duration + 0.05


@pytest.mark.parametrize(("content", "name", "code"), [
    (b"", "empty.wav", "empty_file"),
    (b"RIFF\x24\x00\x00\x00WAVEfmt " + bytes(range(200)), "corrupt.wav", "invalid_audio"),
    (b"this is not audio at all\n" * 40, "notes.mp3", "invalid_audio"),
])
def test_bad_files_are_clear_400s(server_url: str, content: bytes, name: str, code: str) -> None:
    with pytest.raises(openai.BadRequestError) as err:
        client(server_url).audio.transcriptions.create(model="whisper-1", file=(name, content))
    assert err.value.status_code == 400
    body = err.value.body
    assert body["code"] == code and body["param"] == "file" and name in body["message"]
    assert "cadence-upload" not in body["message"]  # no server-side temporary path leaks


def test_unknown_model_and_language(server_url: str, prompt_files: list[tuple[Path, str]]) -> None:
    path, _ = prompt_files[0]
    with pytest.raises(openai.BadRequestError) as err:
        client(server_url).audio.transcriptions.create(model="gpt-4o-transcribe", file=path)
    assert err.value.body["code"] == "model_not_found" and "whisper-1" in err.value.body["message"]
    with pytest.raises(openai.BadRequestError) as err:
        client(server_url).audio.transcriptions.create(model="whisper-1", file=path, language="fr")
    assert err.value.body["param"] == "language"


def test_concurrent_requests_get_their_own_text(server_url: str, prompt_files: list[tuple[Path, str]]) -> None:
    async def run() -> list[str]:
        c = openai.AsyncOpenAI(base_url=server_url + "/v1", api_key="unused", max_retries=0, timeout=120)
        jobs = [c.audio.transcriptions.create(model="whisper-1", file=p, response_format="text")
                for p, _ in prompt_files]
        return list(await asyncio.gather(*jobs))

    texts = asyncio.run(run())
    assert len(texts) == len(prompt_files) == 8
    for (_, ref), got in zip(prompt_files, texts, strict=True):
        assert wer(ref, got) < 0.25, (ref, got)


def test_three_hours_in_one_request(server_url: str, tmp_path: Path) -> None:
    """Mostly silence with five real prompts; each comes back once, at its own time."""
    from testkit.offline_audio import sparse_track, write_audio

    at = [30.0, 2400.0, 5400.0, 8100.0, 10740.0]
    audio, placed = sparse_track(3 * 3600, at, rate=8000)
    path = write_audio(tmp_path / "three_hours.flac", audio, 8000)
    c = client(server_url, timeout=240)
    raw = c.audio.transcriptions.with_raw_response.create(
        model="whisper-1", file=path, response_format="verbose_json", timestamp_granularities=["word"])
    result = raw.parse()
    timings = json.loads(raw.headers["x-cadence-timings"])
    assert abs(result.duration - 3 * 3600) < 0.01
    assert timings["voiced_s"] < 120  # the silence never reached the model
    for p in placed:
        near = [s for s in result.segments if p.start_s - 1.0 <= s.start and s.end <= p.end_s + 1.0]
        assert near, f"nothing transcribed near {p.start_s:.0f} s: {p.text}"
        assert wer(p.text, " ".join(s.text for s in near)) < 0.25, (p.text, [s.text for s in near])
    assert wer(" ".join(p.text for p in placed), result.text) < 0.2
