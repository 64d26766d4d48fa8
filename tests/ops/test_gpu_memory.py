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


# ---------------------------------------------------------------- three stages, measured after warm-up
from agent.gpu_memory import (  # noqa: E402
    StagePeaks,
    check_measured,
    measured_problems,
    stage_memory,
    transformers_cache_fraction,
)

THREE = GPUConfig(asr_fraction=0.10, llm_fraction=0.30, tts_fraction=0.05, headroom_fraction=0.05)


def test_three_stage_plan_caps_the_process_at_asr_plus_tts() -> None:
    plan = preflight(plan_memory(THREE, H200.total_bytes), H200)
    assert plan.in_process_fraction == pytest.approx(0.15)  # one allocator cap for ASR + TTS together
    assert [s.component for s in plan.shares] == ["asr", "llm", "tts"]
    assert plan.share("llm").bytes == 42 * GIB and plan.share("tts").bytes == 7 * GIB


def test_measured_stages_inside_their_shares_pass_and_are_reported_per_stage() -> None:
    plan = plan_memory(THREE, H200.total_bytes)
    stages = stage_memory(plan, {"asr": 6 * GIB, "tts": 2 * GIB}, "transformers", 30 * GIB, 9 * GIB)
    assert [(s.stage, s.measured_bytes) for s in stages] == [
        ("asr", 6 * GIB), ("tts", 2 * GIB), ("llm", 30 * GIB), ("in_process", 9 * GIB)]
    assert stages[-1].share_bytes == 21 * GIB
    assert check_measured(stages, plan.total_bytes) is stages
    assert stages[2].as_dict() == {"stage": "llm", "share_gib": 42.0, "measured_gib": 30.0,
                                   "how": "NVML: the transformers-serve process after warm-up"}


@pytest.mark.parametrize("peaks, llm_used, reserved, named", [
    ({"asr": 6 * GIB, "tts": 8 * GIB}, 30 * GIB, 15 * GIB, "tts measured 8.0 GiB"),
    ({"asr": 15 * GIB, "tts": 2 * GIB}, 30 * GIB, 18 * GIB, "asr measured 15.0 GiB"),
    ({"asr": 6 * GIB, "tts": 2 * GIB}, 50 * GIB, 9 * GIB, "llm measured 50.0 GiB"),
    ({"asr": 6 * GIB, "tts": 2 * GIB}, 30 * GIB, 25 * GIB, "the Cadence process (asr + tts) holds 25.0 GiB"),
])
def test_a_stage_over_its_share_after_warm_up_is_refused_by_name(peaks, llm_used, reserved, named) -> None:
    plan = plan_memory(THREE, H200.total_bytes)
    stages = stage_memory(plan, peaks, "transformers", llm_used, reserved)
    found = measured_problems(stages, plan.total_bytes)
    assert len(found) == 1 and named in found[0], found
    with pytest.raises(GPUPlanError, match="refused after warm-up"):
        check_measured(stages, plan.total_bytes)


def test_a_stage_on_the_gpu_without_a_share_is_named() -> None:
    plan = plan_memory(GPUConfig(asr_fraction=0.2, llm_fraction=0.3), H200.total_bytes)
    found = measured_problems(stage_memory(plan, {"asr": GIB, "tts": 3 * GIB}, "vllm", None), plan.total_bytes)
    assert found == ["tts holds 3.0 GiB on the GPU (torch allocator peak over load + warm-up) but has no share; "
                     "set gpu.tts_fraction to at least 0.021"]


def test_unmeasured_llm_is_not_judged_and_transformers_cache_fraction_bounds() -> None:
    plan = plan_memory(THREE, H200.total_bytes)
    assert measured_problems(stage_memory(plan, {}, "transformers", None), plan.total_bytes) == []
    assert transformers_cache_fraction(42 * GIB, 3 * GIB, 100 * GIB, overhead_bytes=GIB) == pytest.approx(38 / 96, abs=1e-4)
    with pytest.raises(GPUPlanError, match="llm: its share"):
        transformers_cache_fraction(3 * GIB, 3 * GIB, 100 * GIB)


def test_stage_peaks_without_cuda_run_the_stage_and_record_nothing() -> None:
    peaks = StagePeaks()
    assert peaks.measure("asr", lambda: 41 + 1) == 42
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        assert peaks.peaks == {}


def test_server_refuses_a_stage_over_its_share_after_warm_up_unless_told_to_warn() -> None:
    from agent.serve import CadenceServer

    cfg = Config()
    cfg.gpu.asr_fraction, cfg.gpu.llm_fraction, cfg.gpu.tts_fraction = 0.10, 0.30, 0.05
    server = CadenceServer(cfg)
    server.memory_plan, server.llm_kind = plan_memory(cfg.gpu, H200.total_bytes), "transformers"
    over = StagePeaks(peaks={"asr": 6 * GIB, "tts": 9 * GIB})  # tts share: 7 GiB
    with pytest.raises(GPUPlanError, match="tts measured 9.0 GiB"):
        server.check_gpu_memory(over)
    cfg.gpu.check_measured = False
    stages = server.check_gpu_memory(over)  # logged, not refused
    assert {s.stage: s.measured_bytes for s in stages}["tts"] == 9 * GIB
    server.gpu_memory = stages
    assert {s.stage for s in server.gpu_memory_now()} >= {"asr", "tts", "llm"}  # what /metrics exports


def test_metrics_export_gpu_memory_per_stage_and_the_capacity_scrape_reads_it() -> None:
    from agent.capacity.phone_ramp import parse_scrape
    from agent.config import BudgetsConfig
    from agent.metrics.budgets import BudgetMonitor
    from agent.metrics.prometheus import CadenceCollector, make_registry, render
    from agent.metrics.stages import StageMetrics

    plan = plan_memory(THREE, H200.total_bytes)
    stages = StageMetrics()
    for ms in (60.0, 80.0, 120.0):
        stages.record("asr_final", ms)
    collector = CadenceCollector(stages, BudgetMonitor(BudgetsConfig(), stages),
                                 gpu_memory=lambda: stage_memory(plan, {"asr": 6 * GIB}, "transformers", 30 * GIB))
    scrape = parse_scrape(render(make_registry(collector)).decode())
    assert scrape["gpu_memory_gib"] == {"asr_share": 14.0, "asr": 6.0, "tts_share": 7.0, "llm_share": 42.0,
                                        "llm": 30.0}
    assert scrape["tails"]["asr_final"] == pytest.approx(120.0, rel=0.05)
    assert scrape["medians"]["asr_final"] == pytest.approx(80.0, rel=0.05)
