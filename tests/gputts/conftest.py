"""Shared tiny random-weight Kokoro engine for the GPU-TTS tests (CPU, float32)."""

from __future__ import annotations

import shutil
import threading
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


def engine_load_lines(engine, texts: list[str], caplog, tmp_path) -> tuple[list[str], list[int]]:
    """The engine process's load lines (``report_load`` every 0.2 s) while ``texts`` stream through ``engine`` at once,
    and how many audio pieces each text came back in."""
    import asyncio
    import contextlib
    import logging

    from agent.engine_server import EngineServer, _pieces, report_load

    server = EngineServer(engine, tmp_path / "engine.sock")

    async def one(text: str) -> int:
        async with contextlib.aclosing(_pieces(engine, text, None, None)) as pieces:
            return len([p async for p in pieces])

    async def run() -> list[int]:
        reporter = asyncio.create_task(report_load(server, every_s=0.2, tick_s=0.01))
        counts = await asyncio.gather(*(one(t) for t in texts))
        await asyncio.sleep(0.5)
        reporter.cancel()
        return counts

    with caplog.at_level(logging.INFO, logger="cadence.engine"):
        counts = asyncio.run(run())
    return [r.getMessage() for r in caplog.records if "engine load" in r.getMessage()], counts


class HeldModel:
    """Kokoro's tiny model whose batched call waits until ``release`` is set: the CPU stand-in for a GPU that
    stopped finishing work (run 73's two threads in ``.cpu()``), or for a tick still running when something reads
    the batcher (CI's 309 ms tick against 0.2 s load lines)."""

    def __init__(self, model) -> None:
        self._model = model
        self.release = threading.Event()

    def __getattr__(self, name):
        return getattr(self._model, name)

    def synthesize(self, items, frame_bucket=1):
        self.release.wait(30)
        return self._model.synthesize(items, frame_bucket)
