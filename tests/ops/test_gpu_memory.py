"""GPU memory plan math, preflight refusals, and the vLLM command (no GPU needed)."""

from __future__ import annotations

import pytest

from agent.config import Config, GPUConfig
from agent.gpu_memory import (
    GIB,
    DeviceMemory,
    GPUPlanError,
    plan_for,
    plan_memory,
    preflight,
    problems,
    requirements,
    vllm_args,
    weights_bytes,
)

H200 = DeviceMemory(0, "NVIDIA H200", 140 * GIB, 139 * GIB, "given")


def test_plan_turns_shares_into_bytes() -> None:
    plan = plan_memory(GPUConfig(asr_fraction=0.25, llm_fraction=0.6, tts_fraction=0.05), H200.total_bytes)
    assert plan.share("asr").bytes == 35 * GIB
    assert plan.share("llm").bytes == 84 * GIB
    assert plan.in_process_fraction == pytest.approx(0.30)  # ASR + TTS live in Cadence's process
    assert plan.planned_fraction == pytest.approx(0.90)
    assert preflight(plan, H200) is plan
    assert "asr 0.25 (35.0 GiB)" in plan.summary()


def test_shares_past_the_card_are_refused_with_the_sum() -> None:
    plan = plan_memory(GPUConfig(asr_fraction=0.4, llm_fraction=0.6, headroom_fraction=0.05), H200.total_bytes)
    with pytest.raises(GPUPlanError) as err:
        preflight(plan, H200)
    msg = str(err.value)
    assert "sum past the card" in msg and "= 1.05" in msg and "asr 0.40 + llm 0.60" in msg


def test_model_that_cannot_fit_its_share_is_refused() -> None:
    plan = plan_memory(GPUConfig(asr_fraction=0.02, llm_fraction=0.5), H200.total_bytes,
                       {"asr": 4 * GIB, "llm": 30 * GIB})
    found = problems(plan, H200)
    assert len(found) == 1
    assert "asr needs 4.0 GiB but its share is 0.02 x 140.0 GiB = 2.8 GiB" in found[0]
    assert "at least 0.03" in found[0]


def test_plan_larger_than_free_memory_is_refused() -> None:
    busy = DeviceMemory(0, "NVIDIA H200", 140 * GIB, 40 * GIB, "given")
    plan = plan_memory(GPUConfig(asr_fraction=0.2, llm_fraction=0.5), busy.total_bytes)
    found = problems(plan, busy)
    assert len(found) == 1 and "only 40.0 GiB of 140.0 GiB is free" in found[0] and "hold 100.0 GiB" in found[0]


def test_shares_without_a_gpu_and_nothing_on_gpu() -> None:
    cfg = Config()
    assert plan_for(cfg) is None  # the CPU default puts nothing on a GPU
    cfg.gpu.asr_fraction = 0.3
    with pytest.raises(GPUPlanError, match="no CUDA device 0 is visible"):
        preflight(plan_memory(cfg.gpu, 0), None)


def test_requirements_from_config_and_weights_on_disk(tmp_path) -> None:
    model = tmp_path / "parakeet"
    model.mkdir()
    (model / "model.safetensors").write_bytes(b"\0" * 1000)
    (model / "config.json").write_text("{}")
    assert weights_bytes(model) == 1000 and weights_bytes(tmp_path / "absent") is None
    cfg = Config()
    cfg.asr.model = str(model)
    cfg.gpu.llm_min_gb = 20.0
    req = requirements(cfg)
    assert req["asr"] == 1200 and req["llm"] == 20 * GIB and req["tts"] is None


def test_vllm_command_carries_the_planned_share() -> None:
    plan = plan_memory(GPUConfig(asr_fraction=0.25, llm_fraction=0.6), H200.total_bytes)
    cmd = vllm_args(plan, "Qwen/Qwen2.5-7B-Instruct", 8123, "--max-model-len 4096 --enforce-eager")
    i = cmd.index("--gpu-memory-utilization")
    assert cmd[i + 1] == "0.6000"
    assert cmd[cmd.index("--model") + 1] == "Qwen/Qwen2.5-7B-Instruct" and cmd[cmd.index("--port") + 1] == "8123"
    assert cmd[-3:] == ["--max-model-len", "4096", "--enforce-eager"]
    no_llm = plan_memory(GPUConfig(asr_fraction=0.25), H200.total_bytes)
    with pytest.raises(GPUPlanError, match="llm_fraction is 0"):
        vllm_args(no_llm, "m", 1)
