"""Cadence's stages for your own pipecat pipeline (the drop-in API).

``llm_endpoint(config)`` gives the LLM server to talk to: ``llm.base_url`` when set (vLLM, a
remote llama.cpp, any OpenAI-compatible server), else the embedded llama.cpp server, started for
the block and stopped after it. ``Stages.load`` loads and warms the ASR, TTS and VAD once;
each ``Stages`` method makes a fresh per-caller pipecat processor.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from agent.config import Config
from agent.llm_server import embedded_llama_server
from agent.llm_stage import CadenceLLMService
from agent.pipeline import Engines, make_vad, phrase_cache
from tts.service import CadenceTTSService


@contextlib.asynccontextmanager
async def llm_endpoint(config: Config) -> AsyncIterator[tuple[str, str]]:
    """``(base_url, model)``: the configured server, or the embedded one for the duration."""
    if config.llm.base_url:
        yield config.llm.base_url, config.llm.model
        return
    server = embedded_llama_server(config.llm.threads, config.llm.context_size, config.llm.model,
                                   config.llm.server_start_timeout_s, api_key=config.llm.api_key,
                                   nice=config.llm.nice)
    await server.astart()
    try:
        yield server.base_url, server.model_id
    finally:
        server.stop()


@dataclass
class Stages:
    """Loaded, warmed engines; each method makes one caller's processor."""

    engines: Engines

    @classmethod
    async def load(cls, config: Config, base_url: str, model: str) -> Stages:
        return cls(await asyncio.to_thread(Engines.load, config, base_url, model))

    def stt(self) -> Any:
        return self.engines.make_stt()

    def llm(self) -> CadenceLLMService:
        e = self.engines
        return CadenceLLMService(e.config.llm, e.llm_url_for_call(), e.llm_model, http_client=e.llm_http())

    def tts(self) -> CadenceTTSService:
        return CadenceTTSService(self.engines.tts_engine, phrase_cache=phrase_cache(self.engines),
                                 first_clause_max_words=self.engines.config.tts.first_clause_max_words)

    def vad(self) -> Any:
        return make_vad(self.engines.config)
