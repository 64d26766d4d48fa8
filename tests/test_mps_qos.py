"""CUDA MPS quality of service per GPU stage (``agent.mps_qos``): the variables each child process starts with.

No GPU or MPS daemon is needed: the LLM server's and the engine processes' environments are checked as
``cadence serve`` would spawn them (runs 66-68: Kokoro's ticks of 2.5 clauses took ~55 ms beside the LLM and
Parakeet under MPS, one clause alone 18.5 ms; these settings are the A/B lever the next loan measures)."""

from __future__ import annotations

import os

import pytest

from agent.config import Config, load_config
from agent.engine_process import ManagedEngineProcess
from agent.gpu_memory import GIB, DeviceMemory, managed_llm_server, plan_memory
from agent.mps_qos import MPSQoSError, child_env, mps_env

H200 = DeviceMemory(0, "NVIDIA H200", 140 * GIB, 139 * GIB, "given")


def test_each_stage_gets_only_its_own_settings() -> None:
    cfg = Config()
    assert all(mps_env(cfg.gpu, s) == {} for s in ("asr", "llm", "tts"))
    assert child_env(cfg.gpu, "llm") is None  # nothing set: the child inherits
    cfg.gpu.mps_llm_priority, cfg.gpu.mps_llm_sm_percent, cfg.gpu.mps_tts_sm_percent = 1, 60, 40
    assert mps_env(cfg.gpu, "llm") == {"CUDA_MPS_CLIENT_PRIORITY": "1", "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "60"}
    assert mps_env(cfg.gpu, "tts") == {"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "40"}
    assert mps_env(cfg.gpu, "asr") == {}
    env = child_env(cfg.gpu, "tts", {"PATH": "/bin"})
    assert env == {"PATH": "/bin", "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "40"}


@pytest.mark.parametrize(("key", "value", "match"), [("mps_llm_priority", 2, "0 .normal. or 1"),
                                                     ("mps_asr_sm_percent", 101, "1-100"),
                                                     ("mps_tts_sm_percent", -5, "1-100")])
def test_out_of_range_settings_are_refused_with_their_name(key: str, value: int, match: str) -> None:
    cfg = Config()
    setattr(cfg.gpu, key, value)
    with pytest.raises(MPSQoSError, match=f"gpu.{key} = {value}: {match}"):
        mps_env(cfg.gpu, key.split("_")[1])
    with pytest.raises(MPSQoSError, match="no GPU stage"):
        mps_env(cfg.gpu, "vad")


def test_the_llm_server_and_the_engine_processes_start_with_their_stage_settings(tmp_path) -> None:
    cfg = load_config(None, overrides=["gpu.mps_llm_priority=1", "gpu.mps_llm_sm_percent=50",
                                  "gpu.mps_tts_priority=0", "gpu.mps_asr_sm_percent=30"])
    cfg.gpu.vllm_model, cfg.gpu.llm_fraction, cfg.gpu.device = "org/model", 0.5, 0
    server = managed_llm_server(plan_memory(cfg.gpu, H200.total_bytes), cfg, H200)
    assert server.env is not None
    assert server.env["CUDA_MPS_CLIENT_PRIORITY"] == "1" and server.env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "50"
    assert server.env["CUDA_VISIBLE_DEVICES"] == "0" and server.env.get("PATH") == os.environ.get("PATH")
    tts = ManagedEngineProcess.for_config(cfg, 0.2, ("tts",))
    asr = ManagedEngineProcess.for_config(cfg, 0.1, ("asr",))
    assert tts.env is None  # the TTS stage sets nothing: inherited
    assert asr.env is not None and asr.env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "30"
    assert "CUDA_MPS_CLIENT_PRIORITY" not in asr.env
    both = ManagedEngineProcess.for_config(cfg, 0.3, ("tts", "asr"))
    assert both.env is None  # an engine hosting both takes the TTS stage's settings
