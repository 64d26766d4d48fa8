"""Session fixtures shared across the test folders: the real embedded engines, the recorded utterances and
the loopback-ICE ``cadence serve`` (each started once, on first use)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from agent.config import Config
from agent.llm_server import ManagedLLMServer
from testkit.servers import cadence_serve


@dataclass
class Embedded:
    config: Config
    engines: object  # agent.pipeline.Engines
    llm: ManagedLLMServer


@pytest.fixture(scope="session")
def embedded() -> Iterator[Embedded]:
    """The embedded llama.cpp server and the loaded, warmed Engines (Whisper, Piper, VAD, smart-turn) of the
    default config, for the ops, reliability and talk tests that run whole sessions in process."""
    from agent.llm_server import embedded_llama_server
    from agent.pipeline import Engines

    config = Config()
    llm = embedded_llama_server(config.llm.threads, config.llm.context_size, config.llm.model,
                                config.llm.server_start_timeout_s).start()
    try:
        engines = Engines.load(config, llm.base_url, llm.model_id)
        yield Embedded(config, engines, llm)
    finally:
        llm.stop()


@pytest.fixture(scope="session")
def corpus(tmp_path_factory):
    from agent.capacity.corpus import load_corpus

    try:
        return load_corpus(Path(tmp_path_factory.mktemp("utterances")), 16000, limit=24)
    except FileNotFoundError as exc:
        pytest.skip(str(exc))


@pytest.fixture(scope="session")
def webrtc_server(tmp_path_factory) -> Iterator[dict]:
    """A real ``cadence serve`` (embedded models) offering only 127.0.0.1 as ICE host candidate, started once
    for the WebRTC client tests and the browser-page tests (idle in between: ~1% of a core)."""
    with cadence_serve("server.webrtc_ice_hosts=127.0.0.1",
                       log_path=tmp_path_factory.mktemp("logs") / "serve.log") as srv:
        yield srv
