"""``stream=true`` against a real ``cadence transcribe-server`` (embedded Whisper on the CPU):
the ``openai`` SDK and ``curl -N``; deltas join to the done text, which is the non-streamed text;
a client that leaves mid-stream has its remaining windows withdrawn and the server carries on."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

from testkit.servers import cadence_process

openai = pytest.importorskip("openai")


def client(url: str, timeout: float = 180.0):  # type: ignore[no-untyped-def]
    return openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0, timeout=timeout)


def health(url: str) -> dict:
    with urllib.request.urlopen(url + "/health", timeout=10) as r:
        return json.loads(r.read())


@pytest.fixture(scope="module")
def long_speech(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """150 s of continuous speech: six windows of up to 30 s."""
    from testkit.offline_audio import speech_track, write_audio

    audio, _ = speech_track(150, seed=11)
    return write_audio(tmp_path_factory.mktemp("stream") / "speech.flac", audio, 16000)


def test_openai_sdk_stream(server_url: str, long_speech: Path) -> None:
    c = client(server_url)
    types, deltas, done = [], [], None
    for event in c.audio.transcriptions.create(model="whisper-1", file=long_speech, stream=True):
        types.append(event.type)
        if event.type == "transcript.text.delta":
            deltas.append(event.delta)
        else:
            done = event.text
    assert types[-1] == "transcript.text.done" and types.count("transcript.text.done") == 1
    assert len(deltas) >= 3 and done is not None and len(done.split()) > 100  # a delta per window
    assert "".join(deltas) == done
    plain = c.audio.transcriptions.create(model="whisper-1", file=long_speech, response_format="text")
    assert plain.strip() == done


def test_curl_stream(server_url: str, prompt_files: list[tuple[Path, str]]) -> None:
    if shutil.which("curl") is None:
        pytest.skip("curl is not installed")
    path, _ = prompt_files[2]
    cmd = ["curl", "-sS", "-N", "-D", "-", f"{server_url}/v1/audio/transcriptions", "-F", f"file=@{path}",
           "-F", "model=whisper-1", "-F", "stream=true", "-F", "response_format=text"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=True).stdout
    head, _, body = out.partition("\n\n")  # text mode turned CRLF into LF
    assert head.startswith("HTTP/1.1 200") and "text/event-stream" in head.lower()
    events = [json.loads(line[6:]) for line in body.splitlines() if line.startswith("data: ")]
    assert [e["type"] for e in events][-1] == "transcript.text.done"
    joined = "".join(e["delta"] for e in events if e["type"] == "transcript.text.delta")
    assert joined == events[-1]["text"] and joined
    plain = client(server_url).audio.transcriptions.create(model="whisper-1", file=path, response_format="json")
    assert plain.text == joined


def test_stream_errors_before_the_first_byte_stay_json(server_url: str, tmp_path: Path,
                                                      prompt_files: list[tuple[Path, str]]) -> None:
    c = client(server_url)
    empty = tmp_path / "empty.wav"
    empty.write_bytes(b"")
    with pytest.raises(openai.BadRequestError) as err:
        c.audio.transcriptions.create(model="whisper-1", file=empty, stream=True)
    assert err.value.code == "empty_file"
    corrupt = tmp_path / "corrupt.mp3"
    corrupt.write_bytes(b"ID3" + bytes(range(256)) * 8)
    with pytest.raises(openai.BadRequestError) as err:
        c.audio.transcriptions.create(model="whisper-1", file=corrupt, stream=True)
    assert err.value.code == "invalid_audio"
    with pytest.raises(openai.BadRequestError, match="json or text"):
        c.audio.transcriptions.create(model="whisper-1", file=prompt_files[0][0], stream=True,
                                      response_format="srt")


@pytest.mark.parametrize("workers", ["0", "2"])
def test_a_client_leaving_mid_stream_withdraws_its_windows(long_speech: Path, prompt_files: list[tuple[Path, str]],
                                                           workers: str) -> None:
    """Batches of two windows: after the first delta the second batch is running and the third queued;
    leaving then means the third never runs, and the server serves the next request (in one process,
    and through host workers, where the worker withdraws them from the engine process)."""
    args = ["transcribe-server", "--port", "0", "--log-level", "WARNING", "--max-batch", "2", "--workers", workers]
    with cadence_process(args, r"transcription server ready: (http://\S+)/v1 ", timeout_s=120) as srv:
        url = srv["url"]
        stream = client(url).audio.transcriptions.create(model="whisper-1", file=long_speech, stream=True)
        first = next(iter(stream))
        assert first.type == "transcript.text.delta"
        stream.close()
        deadline = time.monotonic() + 60
        while (h := health(url))["inflight"] or h["queued_windows"]:
            assert time.monotonic() < deadline, h
            time.sleep(0.2)
        assert h["windows"] <= 4, h  # six planned; the last batch was withdrawn
        path, _ = prompt_files[0]
        events = list(client(url).audio.transcriptions.create(model="whisper-1", file=path, stream=True))
        assert events[-1].type == "transcript.text.done" and events[-1].text
        assert srv["proc"].poll() is None
        assert not [line for line in srv["log"] if "Traceback" in line], "".join(srv["log"][-40:])
