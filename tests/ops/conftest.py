"""Shared real engines for the ops tests: the embedded llama.cpp server and Engines, once."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from agent.config import Config
from agent.llm_server import ManagedLLMServer


@dataclass
class Embedded:
    config: Config
    engines: object  # agent.pipeline.Engines
    llm: ManagedLLMServer


@pytest.fixture(scope="session")
def embedded() -> Embedded:
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
