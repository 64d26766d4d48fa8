"""A real ``cadence transcribe-server`` (embedded Whisper) shared by the client tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from testkit.servers import cadence_process
from tests.offline.settings import UPLOAD_LIMIT_MB


@pytest.fixture(scope="session")
def server_url() -> Iterator[str]:
    args = ["transcribe-server", "--port", "0", "--log-level", "WARNING", "--max-upload-mb", str(UPLOAD_LIMIT_MB)]
    with cadence_process(args, r"transcription server ready: (http://\S+)/v1 ", timeout_s=120) as srv:
        yield srv["url"]


@pytest.fixture(scope="session")
def prompt_files(tmp_path_factory: pytest.TempPathFactory) -> list[tuple[Path, str]]:
    """Eight real prompts of five words or more, as 8 kHz WAV files, with their texts."""
    from testkit.corpus import prompts

    chosen = prompts(min_words=5)[:8]
    return [(p.path, p.text) for p in chosen]
