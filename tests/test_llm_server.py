"""The managed llama.cpp server (real process) and the vLLM command line."""

from __future__ import annotations

import httpx
import pytest

from agent.llm_server import (
    LLMServerError,
    ManagedLLMServer,
    embedded_llama_server,
    vllm_command,
    wait_healthy,
)


def test_embedded_server_starts_answers_and_stops():
    key = "-Kx3"  # serve.py's secrets.token_urlsafe keys may start with "-": not an option to the server
    with embedded_llama_server(threads=2, api_key=key) as server:
        assert httpx.get(f"{server.base_url}/models", timeout=30).status_code == 401  # the key is demanded
        r = httpx.post(f"{server.base_url}/chat/completions", timeout=60, headers={"Authorization": f"Bearer {key}"},
                       json={"model": server.model_id, "max_tokens": 8,
                             "messages": [{"role": "user", "content": "Say hello."}]})
        assert r.status_code == 200
        assert r.json()["choices"][0]["message"]["content"].strip()
        proc = server.process
        assert proc is not None and server.pid == proc.pid  # what NVML reads the server's GPU memory by
    assert proc is not None and proc.poll() is not None  # stopped
    assert server.pid is None


def test_vllm_command_carries_the_planned_memory_share():
    cmd = vllm_command("org/model", 8123, 0.35, ["--max-model-len", "4096"])
    i = cmd.index("--gpu-memory-utilization")
    assert cmd[i + 1] == "0.3500"
    assert cmd[cmd.index("--port") + 1] == "8123"
    assert cmd[-2:] == ["--max-model-len", "4096"]
    with pytest.raises(ValueError):
        vllm_command("m", 1, 1.5)


def test_a_server_that_dies_at_start_is_reported_with_what_it_said(tmp_path):
    script = "import sys; print('loading model'); print('error: model file is truncated', file=sys.stderr); sys.exit(3)"
    server = ManagedLLMServer(["python3", "-c", script], port=1, start_timeout_s=5)
    with pytest.raises(LLMServerError, match="exited with code 3") as err:
        server.start()
    assert "error: model file is truncated" in str(err.value) and "loading model" in str(err.value)
    logged = ManagedLLMServer(["python3", "-c", script], port=1, start_timeout_s=5, log_path=tmp_path / "llm.log")
    with pytest.raises(LLMServerError, match="model file is truncated"):  # the tail of its log file
        logged.start()


def test_health_check_times_out_clearly():
    with pytest.raises(LLMServerError, match="not healthy"):
        wait_healthy("http://127.0.0.1:9/v1", timeout_s=0.5)


def test_llama_command_uses_llm_threads_for_prompt_evaluation_too(tmp_path):
    """llama_cpp.server evaluates prompts on every core unless told: llm.threads must bound both."""
    from agent.llm_server import llama_cpp_command

    cmd = llama_cpp_command(tmp_path / "m.gguf", 8123, 1, 2048)
    assert cmd[cmd.index("--n_threads") + 1] == "1"
    assert cmd[cmd.index("--n_threads_batch") + 1] == "1"
    assert cmd[cmd.index("--logits_all") + 1] == "false"  # no per-token logits: Cadence asks for no logprobs
