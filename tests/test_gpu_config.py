"""``examples/gpu.toml``: its three-stage plan on an H200-sized card, the LLM server it launches, and
the refusal that names the stage, checked on the CPU (no GPU, no model downloads)."""

from __future__ import annotations

import pytest

from agent.config import load_config
from agent.gpu_memory import GIB, DeviceMemory, GPUPlanError, llm_server_kind, managed_llm_server, plan_for
from testkit.servers import ROOT

H200 = DeviceMemory(0, "NVIDIA H200", int(140.4 * GIB), int(139.8 * GIB), "given")


def sparse(path, size: int):
    path.mkdir(parents=True, exist_ok=True)
    with open(path / "model.safetensors", "wb") as f:
        f.truncate(size)
    return path


def gpu_config(tmp_path, *extra: str):
    asr = sparse(tmp_path / "parakeet", int(1.25 * GIB))
    llm = sparse(tmp_path / "llm", int(2.5 * GIB))
    return load_config(ROOT / "examples" / "gpu.toml", [f"asr.model={asr}", f"llm.model={llm}", *extra])


def test_gpu_toml_plans_three_stages_and_launches_transformers_serve(tmp_path):
    cfg = gpu_config(tmp_path)
    assert (cfg.asr.engine, cfg.asr.device, cfg.tts.engine) == ("parakeet", "cuda", "kokoro")
    assert llm_server_kind(cfg) == "transformers" and cfg.llm.max_tokens <= 64
    assert cfg.llm.speculate == "final+quiet"  # runs 89-92: every turn answered once with it
    # runs 95-97: Kokoro's fused steps compiled inside its CUDA graphs, 256 callers p50 765 -> 549 ms
    assert cfg.tts.kokoro_cuda_graphs and cfg.tts.kokoro_compile
    plan = plan_for(cfg, H200)
    assert plan is not None and plan.in_process_fraction == pytest.approx(0.40)  # asr 0.15 + tts 0.25
    assert plan.share("asr").required_bytes == int(1.25 * GIB * 1.2)  # weights on disk x overhead
    server = managed_llm_server(plan, cfg, H200)
    cmd = server.command
    assert cmd[cmd.index("serve") + 1:cmd.index("--continuous-batching")] == [
        "--host", "127.0.0.1", "--port", str(server.port)]
    fraction = float(cmd[cmd.index("--cb-max-memory-percent") + 1])
    # weights + cache + context stay inside 0.40 of the card
    assert 2.5 * GIB + fraction * (H200.free_bytes - 5.5 * GIB) + 3 * GIB <= 0.40 * H200.total_bytes
    assert server.env["CUDA_VISIBLE_DEVICES"] == "0"


def test_gpu_toml_with_a_stage_that_cannot_fit_is_refused_by_name(tmp_path):
    cfg = gpu_config(tmp_path, "gpu.llm_fraction=0.015")
    with pytest.raises(GPUPlanError) as err:
        plan_for(cfg, H200)
    assert "llm needs 3.0 GiB but its share is 0.01" in str(err.value)
    cfg = gpu_config(tmp_path, "gpu.tts_fraction=0.5")
    with pytest.raises(GPUPlanError, match="sum past the card"):
        plan_for(cfg, H200)


def test_gpu_toml_runs_on_the_cpu_with_cpu_engines(tmp_path):
    """The same file with CPU stand-ins (tiny Parakeet, Piper, the embedded LLM): no GPU plan at all."""
    cfg = load_config(ROOT / "examples" / "gpu.toml", [
        "asr.device=cpu", "asr.dtype=float32", "asr.encoder_backend=eager", "asr.model=", "tts.engine=piper",
        "llm.server=llama.cpp", "llm.model=", "gpu.asr_fraction=0", "gpu.llm_fraction=0", "gpu.tts_fraction=0"])
    assert plan_for(cfg, None) is None and llm_server_kind(cfg) == "llama.cpp"
