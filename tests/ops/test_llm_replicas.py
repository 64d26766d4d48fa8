"""``llm.replicas`` / a comma-separated ``llm.base_url``: each call sticks to one of several LLM servers,
calls take them in turn, and Cadence's GPU replicas split the LLM's memory share.

The spreading is checked end to end: two real llama.cpp servers (SmolLM2), two calls through the real
pipeline, each server's own access log shows one call's requests.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from pathlib import Path

import pytest

from agent.capacity.analysis import turn_deliveries
from agent.capacity.caller import call
from agent.config import Config, ConfigError
from agent.gpu_memory import GIB, DeviceMemory, managed_llm_server, plan_memory, transformers_cache_fraction
from agent.llm_replicas import LLMServerGroup, ReplicaPicker, replica_urls
from agent.llm_server import embedded_llama_server
from agent.serve import CadenceServer
from tests.ops.helpers import gate_admit, make_server, params

H200 = DeviceMemory(0, "NVIDIA H200", 140 * GIB, 139 * GIB, "given")
CHAT = "POST /v1/chat/completions"


def test_urls_are_split_and_calls_take_them_in_turn() -> None:
    assert replica_urls("http://a:1/v1/, http://b:2/v1") == ["http://a:1/v1", "http://b:2/v1"]
    assert replica_urls("") == []
    with pytest.raises(ValueError, match="empty entry"):
        replica_urls("http://a/v1,,http://b/v1")
    picker = ReplicaPicker(["a", "b", "c"], start=4)
    assert [picker.pick() for _ in range(5)] == ["b", "c", "a", "b", "c"]
    with pytest.raises(ValueError):
        ReplicaPicker([])


def test_gpu_replicas_split_the_llm_share(tmp_path: Path) -> None:
    cfg = Config()
    cfg.gpu.vllm_model, cfg.gpu.llm_fraction, cfg.gpu.device = "org/model", 0.6, 0
    cmd = managed_llm_server(plan_memory(cfg.gpu, H200.total_bytes), cfg, H200, replicas=2).command
    assert cmd[cmd.index("--gpu-memory-utilization") + 1] == "0.3000"

    model = tmp_path / "llm"
    model.mkdir()
    with open(model / "model.safetensors", "wb") as f:
        f.truncate(int(2.5 * GIB))
    cfg = Config()
    cfg.llm.server, cfg.llm.model = "transformers", str(model)
    cfg.gpu.llm_fraction = 0.25  # 35 GiB: two replicas of 17.5 GiB each
    plan = plan_memory(cfg.gpu, H200.total_bytes)
    cmd = managed_llm_server(plan, cfg, H200, replicas=2).command
    want = transformers_cache_fraction(int(17.5 * GIB), int(2.5 * GIB), H200.free_bytes)
    assert float(cmd[cmd.index("--cb-max-memory-percent") + 1]) == pytest.approx(want, abs=1e-4)
    cfg.gpu.llm_fraction = 0.06  # 8.4 GiB: one replica fits, three do not
    plan = plan_memory(cfg.gpu, H200.total_bytes)
    managed_llm_server(plan, cfg, H200, replicas=1)
    with pytest.raises(Exception, match="split 3 ways by llm.replicas"):
        managed_llm_server(plan, cfg, H200, replicas=3)


async def test_replicas_need_a_gpu_server_cadence_starts() -> None:
    cfg = Config()
    cfg.llm.replicas = 2  # the embedded llama.cpp server: nothing to replicate on two cores
    with pytest.raises(ConfigError, match="replicas of a GPU server only"):
        await CadenceServer(cfg).start_llm()
    cfg.llm.server, cfg.llm.base_url = "vllm", "http://127.0.0.1:9/v1"
    with pytest.raises(ConfigError, match="list them in llm.base_url"):
        await CadenceServer(cfg).start_llm()


@pytest.mark.timeout(300)
async def test_two_calls_go_to_two_servers(embedded, corpus, tmp_path: Path) -> None:
    logs = [tmp_path / "llm-0.log", tmp_path / "llm-1.log"]
    group = LLMServerGroup([embedded_llama_server(1, 2048, "", 60.0, log) for log in logs])
    await asyncio.gather(*(server.astart() for server in group.servers))
    try:
        assert group.up and len(group.pids) == 2
        engines = dataclasses.replace(embedded.engines, llm_base_url=group.base_url, _llm_picker=None,
                                      llm_model=group.model_id)
        server, _ = make_server(embedded, engines=engines)

        async def one(k: int) -> None:
            record = await call(server.run_caller, params(server), k, [corpus[k]], stop_at=time.monotonic() + 1.0,
                                max_wait_s=40.0, admit=gate_admit(server), leave=server.gate.release)
            turns = turn_deliveries(record)
            assert turns and turns[0].answered, record

        await asyncio.gather(one(0), one(1))  # at once: each still sticks to the server it was given
        await asyncio.sleep(0.2)
        counts = [log.read_text(errors="replace").count(CHAT) for log in logs]
        assert all(c >= 1 for c in counts), counts  # each call asked its own server
    finally:
        group.stop()
    assert not group.up and group.pids == []
