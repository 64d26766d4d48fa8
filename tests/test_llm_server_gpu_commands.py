"""The GPU LLM servers' command lines and environments (vLLM, transformers serve), and health per kind.

No GPU and neither server is needed: the commands are checked whole, and the health wait runs
against a real child process that answers like transformers serve offline (``/health`` 200,
``/v1/models`` 500).
"""

from __future__ import annotations

import os
import sys
import textwrap

import httpx
import pytest

from agent.config import Config
from agent.gpu_memory import GIB, DeviceMemory, managed_llm_server, plan_memory, transformers_cache_fraction
from agent.llm_server import (
    LLMServerError,
    ManagedLLMServer,
    free_port,
    gpu_llm_server,
    health_url,
    pinned_env,
    transformers_command,
    wait_healthy,
)

H200 = DeviceMemory(0, "NVIDIA H200", 140 * GIB, 139 * GIB, "given")


def test_vllm_command_is_pinned_with_its_share_length_and_name():
    server = gpu_llm_server("vllm", "/models/qwen3-1.7b", 1, gpu_memory_utilization=0.35, max_model_len=4096,
                            served_model_name="cadence-llm", extra=["--enforce-eager"], environ={"PATH": "/bin"})
    assert server.command == [
        sys.executable, "-m", "vllm.entrypoints.openai.api_server",
        "--model", "/models/qwen3-1.7b", "--host", "127.0.0.1", "--port", str(server.port),
        "--gpu-memory-utilization", "0.3500", "--max-model-len", "4096",
        "--served-model-name", "cadence-llm", "--enforce-eager",
    ]  # fmt: skip
    assert server.env == {"PATH": "/bin", "CUDA_VISIBLE_DEVICES": "1", "HF_HUB_OFFLINE": "1"}
    assert server.kind == "vllm" and server.model_name == "cadence-llm"
    with pytest.raises(LLMServerError, match="planned share"):
        gpu_llm_server("vllm", "m", 0)


def test_transformers_serve_command_and_health_path():
    cmd = transformers_command("/tmp/llm", 8011, cache_memory_fraction=0.232)
    assert cmd == [sys.executable, "-m", "transformers.cli.transformers", "serve", "--host", "127.0.0.1",
                   "--port", "8011", "--continuous-batching", "--cb-max-memory-percent", "0.2320",
                   "--cb-use-cuda-graph", "/tmp/llm"]
    assert transformers_command("/tmp/llm", 1)[-2:] == ["--continuous-batching", "/tmp/llm"]  # CPU: no graphs
    eager = transformers_command("/tmp/llm", 1, ["--no-cb-use-cuda-graph"], cache_memory_fraction=0.2)
    assert "--cb-use-cuda-graph" not in eager and eager[-2:] == ["--no-cb-use-cuda-graph", "/tmp/llm"]
    assert health_url("http://127.0.0.1:8011/v1", "transformers") == "http://127.0.0.1:8011/health"
    assert health_url("http://127.0.0.1:8011/v1", "vllm") == "http://127.0.0.1:8011/v1/models"
    with pytest.raises(ValueError):
        transformers_command("m", 1, cache_memory_fraction=1.5)


def test_pinning_indexes_the_parents_visible_gpus():
    assert pinned_env(1, {"CUDA_VISIBLE_DEVICES": "4,5"})["CUDA_VISIBLE_DEVICES"] == "5"
    assert pinned_env(0, {})["CUDA_VISIBLE_DEVICES"] == "0"
    with pytest.raises(LLMServerError, match="shows 2 GPU"):
        pinned_env(2, {"CUDA_VISIBLE_DEVICES": "4,5"})


def test_config_to_transformers_server_sizes_its_cache_to_the_share(tmp_path):
    model = tmp_path / "llm"
    model.mkdir()
    with open(model / "model.safetensors", "wb") as f:  # 2.5 GiB of weights, sparse on disk
        f.truncate(int(2.5 * GIB))
    cfg = Config()
    cfg.llm.server, cfg.llm.model, cfg.gpu.device = "transformers", str(model), 0
    cfg.gpu.asr_fraction, cfg.gpu.llm_fraction, cfg.gpu.tts_fraction = 0.2, 0.25, 0.1
    plan = plan_memory(cfg.gpu, H200.total_bytes)
    server = managed_llm_server(plan, cfg, H200)
    expected = transformers_cache_fraction(35 * GIB, int(2.5 * GIB), 139 * GIB)
    # (35 - 2.5 - 3) / (139 - 2.5 - 3) of the free memory: the cache plus weights stay inside 35 GiB
    assert expected == pytest.approx(29.5 / 133.5, abs=1e-4) and expected <= 29.5 / 133.5
    assert server.command[-4:] == ["--cb-max-memory-percent", f"{expected:.4f}", "--cb-use-cuda-graph", str(model)]
    assert server.env is not None and server.env["CUDA_VISIBLE_DEVICES"] == "0"
    assert server.model_name == str(model) and server.start_timeout_s >= 600
    cfg.gpu.llm_fraction = 0.02  # 2.8 GiB cannot hold 2.5 GiB of weights and the context
    with pytest.raises(Exception, match="does not hold its weights"):
        managed_llm_server(plan_memory(cfg.gpu, H200.total_bytes), cfg, H200)


def test_config_to_vllm_server_and_legacy_vllm_model():
    cfg = Config()
    cfg.gpu.vllm_model, cfg.gpu.llm_fraction, cfg.gpu.device = "org/model", 0.6, 0
    cfg.llm.context_size = 4096
    server = managed_llm_server(plan_memory(cfg.gpu, H200.total_bytes), cfg, H200)
    cmd = server.command
    assert cmd[cmd.index("--gpu-memory-utilization") + 1] == "0.6000"
    assert cmd[cmd.index("--max-model-len") + 1] == "4096" and cmd[cmd.index("--model") + 1] == "org/model"
    cfg.gpu.llm_fraction = 0.0
    with pytest.raises(Exception, match="llm_fraction is 0"):
        managed_llm_server(plan_memory(cfg.gpu, H200.total_bytes), cfg, H200)


FAKE_TRANSFORMERS_SERVE = textwrap.dedent("""
    import http.server, json, os, sys
    class H(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            if self.path == "/health":
                body, code = json.dumps({"status": "ok", "cvd": os.environ.get("CUDA_VISIBLE_DEVICES")}), 200
            else:  # /v1/models looks the model up on the Hub: offline it fails
                body, code = "hub unreachable", 500
            self.send_response(code); self.end_headers(); self.wfile.write(body.encode())
        def log_message(self, *a): pass
    http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
""")


def test_health_per_kind_against_a_server_whose_models_page_fails():
    port = free_port()
    server = ManagedLLMServer([sys.executable, "-c", FAKE_TRANSFORMERS_SERVE, str(port)], port, 20.0,
                              kind="transformers", env=pinned_env(3, {"PATH": os.environ["PATH"]}),
                              model_name="/tmp/llm")
    with server:
        assert server.model_id == "/tmp/llm"
        assert httpx.get(f"http://127.0.0.1:{port}/health").json()["cvd"] == "3"  # the child is pinned
        with pytest.raises(LLMServerError, match="HTTP 500"):  # waiting on /v1/models would never end
            wait_healthy(server.base_url, 0.5, kind="vllm")
        proc = server.process
    assert proc is not None and proc.poll() is not None  # stopped with its process group
