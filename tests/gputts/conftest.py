"""Shared tiny random-weight Kokoro engine for the GPU-TTS tests (CPU, float32)."""

from __future__ import annotations

import shutil
from collections.abc import Iterator

import pytest

torch = pytest.importorskip("torch")


def g2p_kind() -> str:
    """Real phonemes where Debian's espeak-ng is installed (CI installs it), else letters."""
    return "espeak" if shutil.which("espeak-ng") else "chars"


@pytest.fixture(scope="session")
def engine() -> Iterator[object]:
    from tts.kokoro.engine import KokoroEngine
    from tts.kokoro.options import KokoroOptions

    eng = KokoroEngine(KokoroOptions(tiny=True, device="cpu", max_batch=16, warmup=False, g2p=g2p_kind(),
                                     first_clause_words=3))
    yield eng
    eng.close()
