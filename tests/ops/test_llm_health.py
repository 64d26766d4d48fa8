"""The LLM health check against a real OpenAI-compatible server (llama.cpp with SmolLM2)."""

from __future__ import annotations

import pytest

from agent.gpu_memory import check_llm_server
from agent.llm_server import LLMServerError, free_port


def test_health_check_on_a_live_server(embedded):
    health = check_llm_server(embedded.llm.base_url, timeout_s=30.0)
    assert health.model == embedded.llm.model_id
    assert health.text  # one real token came back
    assert 0.0 < health.first_token_ms < 30_000.0 and health.models_ms < 5_000.0


def test_health_check_names_a_dead_server():
    url = f"http://127.0.0.1:{free_port()}/v1"
    with pytest.raises(LLMServerError, match=f"LLM server at {url} is not healthy: GET /models failed"):
        check_llm_server(url, timeout_s=2.0)
