"""The server through ``curl``: every format, bad files, the upload limit, bad fields."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from testkit.corpus import wer
from tests.offline.settings import UPLOAD_LIMIT_MB

if shutil.which("curl") is None:
    pytest.skip("curl is not installed", allow_module_level=True)


def curl(url: str, *fields: str) -> tuple[int, str, str]:
    """POST multipart ``fields`` (curl -F syntax); returns (status, content type, body)."""
    cmd = ["curl", "-sS", "-o", "-", "-w", "\n%{http_code} %{content_type}", f"{url}/v1/audio/transcriptions"]
    for f in fields:
        cmd += ["-F", f]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=True).stdout
    body, _, tail = out.rpartition("\n")
    status, _, ctype = tail.partition(" ")
    return int(status), ctype, body


@pytest.mark.parametrize(("fmt", "ctype"), [("json", "application/json"), ("text", "text/plain"),
                                            ("srt", "application/x-subrip"), ("vtt", "text/vtt"),
                                            ("verbose_json", "application/json")])
def test_formats(server_url: str, prompt_files: list[tuple[Path, str]], fmt: str, ctype: str) -> None:
    path, ref = prompt_files[1]
    status, got_type, body = curl(server_url, f"file=@{path}", "model=whisper-1", f"response_format={fmt}")
    assert status == 200 and got_type.startswith(ctype)
    if fmt == "json":
        text = json.loads(body)["text"]
    elif fmt == "verbose_json":
        data = json.loads(body)
        assert data["segments"][0]["start"] >= 0 and data["duration"] > data["segments"][-1]["end"] - 0.05
        text = data["text"]
    elif fmt == "srt":
        cues = [c.split("\n") for c in body.strip().split("\n\n")]
        assert [c[0] for c in cues] == [str(i) for i in range(1, len(cues) + 1)]
        assert all(re.fullmatch(r"\d\d:\d\d:\d\d,\d{3} --> \d\d:\d\d:\d\d,\d{3}", c[1]) for c in cues)
        text = " ".join(" ".join(c[2:]) for c in cues)
    elif fmt == "vtt":
        header, *cues = [c.split("\n") for c in body.strip().split("\n\n")]
        assert header == ["WEBVTT"] and cues
        assert all(re.fullmatch(r"\d\d:\d\d:\d\d\.\d{3} --> \d\d:\d\d:\d\d\.\d{3}", c[0]) for c in cues)
        text = " ".join(" ".join(c[1:]) for c in cues)
    else:
        text = body
    assert wer(ref, text) < 0.2, text


def test_zero_byte_and_corrupt_files(server_url: str, tmp_path: Path) -> None:
    empty = tmp_path / "empty.wav"
    empty.write_bytes(b"")
    status, _, body = curl(server_url, f"file=@{empty}", "model=whisper-1")
    assert status == 400 and json.loads(body)["error"]["code"] == "empty_file"

    corrupt = tmp_path / "truncated.flac"
    corrupt.write_bytes(b"fLaC\x00\x00\x00\x22" + b"\xff" * 300)
    status, _, body = curl(server_url, f"file=@{corrupt}", "model=whisper-1")
    error = json.loads(body)["error"]
    assert status == 400 and error["code"] == "invalid_audio" and "truncated.flac" in error["message"]


def test_upload_limit_is_413(server_url: str, tmp_path: Path) -> None:
    big = tmp_path / "big.wav"
    big.write_bytes(b"\0" * int((UPLOAD_LIMIT_MB + 1) * 1e6))
    status, _, body = curl(server_url, f"file=@{big}", "model=whisper-1")
    assert status == 413 and json.loads(body)["error"]["code"] == "file_too_large"


def test_bad_fields(server_url: str, prompt_files: list[tuple[Path, str]]) -> None:
    path, _ = prompt_files[0]
    status, _, body = curl(server_url, "model=whisper-1")
    assert status == 400 and json.loads(body)["error"]["param"] == "file"
    status, _, body = curl(server_url, f"file=@{path}")
    assert status == 400 and json.loads(body)["error"]["param"] == "model"
    status, _, body = curl(server_url, f"file=@{path}", "model=whisper-1", "response_format=docx")
    assert status == 400 and "srt" in json.loads(body)["error"]["message"]
    status, _, body = curl(server_url, f"file=@{path}", "model=whisper-1", "timestamp_granularities[]=word")
    assert status == 400 and "verbose_json" in json.loads(body)["error"]["message"]
