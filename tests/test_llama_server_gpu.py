"""llama.cpp's native server as a GPU LLM (``llm.server = "llama-server"``): its command line, its slots sized
from the GGUF header against the planned share, the refusals, and the GGUF header reader itself.

No GPU and no llama-server binary are needed: the GGUF files are real (the embedded SmolLM2 model, and
headers written here byte by byte) and the command is checked whole against a stand-in executable on PATH.
"""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from agent.config import Config
from agent.gguf_meta import GGUFError, read_model
from agent.gpu_memory import GIB, DeviceMemory, GPUPlanError, managed_llm_server, plan_memory
from agent.llm_server import LLMServerError, llama_server_binary, llama_server_command

H200 = DeviceMemory(0, "NVIDIA H200", 140 * GIB, 139 * GIB, "given")


def _kv(key: str, vtype: int, payload: bytes) -> bytes:
    k = key.encode()
    return struct.pack("<Q", len(k)) + k + struct.pack("<I", vtype) + payload


def _u32(key: str, v: int) -> bytes:
    return _kv(key, 4, struct.pack("<I", v))


def _str(key: str, v: str) -> bytes:
    return _kv(key, 8, struct.pack("<Q", len(v.encode())) + v.encode())


def llama_1b_header(path: Path, weights_bytes: int = 0) -> Path:
    """A GGUF header with Llama-3.2-1B's shape (16 layers, 32/8 heads, width 2048, 128256 tokens), the
    vocabulary as a string array; ``weights_bytes`` of zeros after it stand for the tensors."""
    tokens = [f"t{i}" for i in range(128256)]
    arr = struct.pack("<IQ", 8, len(tokens)) + b"".join(struct.pack("<Q", len(t)) + t.encode() for t in tokens)
    kvs = [_str("general.architecture", "llama"), _u32("llama.block_count", 16), _u32("llama.embedding_length", 2048),
           _u32("llama.attention.head_count", 32), _u32("llama.attention.head_count_kv", 8),
           _kv("tokenizer.ggml.tokens", 9, arr), _kv("llama.rope.freq_base", 6, struct.pack("<f", 5e5))]
    with open(path, "wb") as f:
        f.write(b"GGUF" + struct.pack("<IQQ", 3, 0, len(kvs)) + b"".join(kvs))
        if weights_bytes:
            f.truncate(f.tell() + weights_bytes)  # sparse: no disk used
    return path


def test_the_header_reader_gives_the_shape_of_a_real_model():
    from agent.models import smollm2_gguf

    m = read_model(smollm2_gguf())
    assert (m.arch, m.n_layer, m.n_embd, m.n_head, m.n_head_kv, m.head_dim_k, m.n_vocab) == (
        "llama", 30, 576, 9, 3, 64, 49152)
    assert m.kv_bytes_per_token() == 30 * 3 * (64 + 64) * 2


def test_a_file_that_is_not_gguf_or_is_cut_short_is_named(tmp_path):
    bad = tmp_path / "model.gguf"
    bad.write_bytes(b"PK\x03\x04 a zip, not a model")
    with pytest.raises(GGUFError, match="not a GGUF file"):
        read_model(bad)
    whole = llama_1b_header(tmp_path / "whole.gguf").read_bytes()
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(whole[: len(whole) // 2])
    with pytest.raises(GGUFError, match="cut short"):
        read_model(cut)


def test_command_puts_every_layer_on_the_gpu_with_the_slots_total_context():
    cmd = llama_server_command("/opt/llama-server", "/m/llm.gguf", 8011, 64, 4096, ["--threads", "4"])
    assert cmd == ["/opt/llama-server", "--model", "/m/llm.gguf", "--host", "127.0.0.1", "--port", "8011",
                   "--n-gpu-layers", "999", "--parallel", "64", "--ctx-size", str(64 * 4096), "--cont-batching",
                   "--jinja", "--no-webui", "--alias", "llm", "--threads", "4"]
    with pytest.raises(ValueError):
        llama_server_command("/opt/llama-server", "m.gguf", 1, 0, 4096)


def test_a_missing_binary_says_how_to_get_one(monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(LLMServerError, match="llama_server_src.sh"):
        llama_server_binary("")


@pytest.fixture
def fake_binary(tmp_path, monkeypatch) -> Path:
    exe = tmp_path / "bin" / "llama-server"
    exe.parent.mkdir()
    exe.write_text("#!/bin/sh\nexit 0\n")
    exe.chmod(0o755)
    monkeypatch.setenv("PATH", str(exe.parent))
    return exe


def _config(model: Path, llm_fraction: float = 0.40) -> Config:
    cfg = Config()
    cfg.llm.server, cfg.llm.model, cfg.llm.context_size = "llama-server", str(model), 4096
    cfg.gpu.asr_fraction, cfg.gpu.llm_fraction, cfg.gpu.tts_fraction = 0.15, llm_fraction, 0.15
    cfg.admission.max_sessions = 256
    return cfg


def test_auto_slots_are_one_per_admitted_caller_when_the_share_holds_them(tmp_path, fake_binary):
    model = llama_1b_header(tmp_path / "llm.gguf", weights_bytes=int(2.5 * GIB))
    cfg = _config(model)
    server = managed_llm_server(plan_memory(cfg.gpu, H200.total_bytes), cfg, H200)
    # 256 slots x 4096 tokens x 32 KiB a token (16 layers x 8 KV heads x (64 + 64) x 2 bytes) = 32 GiB < 56 GiB
    assert server.command[server.command.index("--parallel") + 1] == "256"
    assert server.command[server.command.index("--ctx-size") + 1] == str(256 * 4096)
    assert server.command[0] == str(fake_binary) and server.kind == "llama-server"
    assert server.env["CUDA_VISIBLE_DEVICES"] == "0" and server.model_name == "llm"


def test_slots_stop_at_llama_cpps_256_sequences(tmp_path, fake_binary):
    # run 38: 8 workers x 256 callers asked for 512 slots and llama-server exited ("n_seq_max must be <= 256")
    model = llama_1b_header(tmp_path / "llm.gguf", weights_bytes=int(2.5 * GIB))
    cfg = _config(model, llm_fraction=0.60)
    cfg.server.workers = 8
    plan = plan_memory(cfg.gpu, H200.total_bytes)
    cmd = managed_llm_server(plan, cfg, H200).command
    assert cmd[cmd.index("--parallel") + 1] == "256"
    cfg.llm.parallel = 300
    with pytest.raises(GPUPlanError, match="at most 256 slots"):
        managed_llm_server(plan, cfg, H200)


def test_a_small_share_gets_the_slots_it_holds_and_an_explicit_count_too_many_is_refused(tmp_path, fake_binary):
    model = llama_1b_header(tmp_path / "llm.gguf", weights_bytes=int(2.5 * GIB))
    cfg = _config(model, llm_fraction=0.05)  # 7 GiB: 2.5 GiB of weights, ~1.3 GiB of buffers, 25 slots of 128 MiB
    plan = plan_memory(cfg.gpu, H200.total_bytes)
    cmd = managed_llm_server(plan, cfg, H200).command
    slots = int(cmd[cmd.index("--parallel") + 1])
    assert 20 <= slots <= 26
    cfg.admission.max_sessions = 8  # never more slots than callers
    cmd = managed_llm_server(plan, cfg, H200).command
    assert cmd[cmd.index("--parallel") + 1] == "8"
    cfg.llm.parallel = 64
    with pytest.raises(GPUPlanError, match="not llm.parallel = 64"):
        managed_llm_server(plan, cfg, H200)
    cfg.llm.parallel = 0
    cfg.gpu.llm_fraction = 0.02  # 2.8 GiB: not even the weights and one slot
    with pytest.raises(GPUPlanError, match="raise gpu.llm_fraction"):
        managed_llm_server(plan_memory(cfg.gpu, H200.total_bytes), cfg, H200)


def test_a_model_that_is_not_a_local_gguf_is_refused(tmp_path, fake_binary):
    cfg = _config(tmp_path / "llm")  # a folder name, as transformers takes
    with pytest.raises(GPUPlanError, match="local .gguf file"):
        managed_llm_server(plan_memory(cfg.gpu, H200.total_bytes), cfg, H200)


def test_with_no_gpu_share_a_cpu_build_gets_a_few_slots(tmp_path, fake_binary):
    model = llama_1b_header(tmp_path / "llm.gguf")
    cfg = _config(model, llm_fraction=0.0)
    cfg.gpu.asr_fraction = cfg.gpu.tts_fraction = 0.0
    cmd = managed_llm_server(None, cfg).command
    assert cmd[cmd.index("--parallel") + 1] == "4"
    cfg.llm.parallel = 2
    assert managed_llm_server(None, cfg).command[cmd.index("--parallel") + 1] == "2"
