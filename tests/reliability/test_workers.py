"""``cadence serve --workers 2`` on the embedded stack: real worker processes sharing one port.

Phone callers are spread evenly over both workers (the parent hands each connection to the less loaded one),
the parent's summed ``/metrics`` counts every call, a SIGKILLed worker is restarted and gets calls again,
SIGTERM leaves no child (workers, llama.cpp server), a browser peer's later requests reach its worker over any
connection, and ``server.balance = "kernel"`` (SO_REUSEPORT) still serves calls.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import time
from collections.abc import Iterator

import httpx
import psutil
import pytest

from agent.llm_server import free_port
from agent.metrics.scrape import parse_metrics
from agent.workers import auto_workers, split_budget, worker_overrides
from testkit.servers import cadence_serve


def test_budgets_split_rounded_up_and_gpu_shares_divided():
    from agent.config import Config

    cfg = Config()
    cfg.admission.max_sessions, cfg.admission.queue_size = 33, 2
    cfg.gpu.asr_fraction, cfg.gpu.tts_fraction, cfg.gpu.llm_fraction = 0.08, 0.16, 0.5
    sets = dict(s.split("=", 1) for s in worker_overrides(cfg, 8, "http://127.0.0.1:1/v1", "m", 4242))
    assert sets["admission.max_sessions"] == "5" and sets["admission.queue_size"] == "1"
    assert float(sets["gpu.asr_fraction"]) == 0.01 and float(sets["gpu.tts_fraction"]) == 0.02
    assert sets["gpu.llm_fraction"] == "0.0" and sets["server.metrics_listen"] == "127.0.0.1:4242"
    assert split_budget(32, 8) == 4 and split_budget(0, 4) == 0


def test_auto_workers_leave_a_core_to_each_engine_the_llm_and_the_parent():
    from agent.config import Config, load_config

    gpu = load_config("examples/gpu.toml")  # two engine processes (Kokoro, Parakeet) and transformers serve
    assert auto_workers(gpu, 16) == 12 and auto_workers(gpu, 2) == 1
    gpu.server.tts_engines, gpu.llm.replicas = 2, 2
    assert auto_workers(gpu, 16) == 10
    gpu.llm.base_url = "http://10.0.0.2:8000/v1"  # an LLM server Cadence does not start takes no core here
    assert auto_workers(gpu, 16) == 12
    assert auto_workers(Config(), 8) == 6  # the embedded stack: llama.cpp's server and the parent


def test_workers_run_at_the_configured_nice_increment(monkeypatch):
    import sys

    from agent.config import Config
    from agent.workers import Worker, WorkerPool

    cfg = Config()
    cfg.server.worker_nice = 3
    pool = WorkerPool(cfg, serve_args=[])
    monkeypatch.setattr(pool, "_command", lambda w: [sys.executable, "-c", "import time; time.sleep(30)"])
    pool._overrides[0] = []
    worker = Worker(0, free_port())
    pool._spawn(worker)
    try:
        assert psutil.Process(worker.proc.pid).nice() == psutil.Process().nice() + 3
    finally:
        worker.proc.kill()
        worker.proc.wait()


def test_a_negative_worker_count_is_refused_before_anything_starts():
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-m", "agent.cli", "serve", "--workers", "-1"], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode != 0 and "server.workers must be >= 0" in done.stderr + done.stdout


def _health(url: str) -> dict:
    return httpx.get(f"{url}/health", timeout=10).json()


def _admitted(metrics: str) -> float:
    """``cadence_admissions_total`` of a /metrics page (both workers summed by the parent)."""
    lines = [line for line in metrics.splitlines() if line.startswith("cadence_admissions_total ")]
    assert lines, metrics[-400:]
    return float(lines[0].split()[1])


@pytest.fixture(scope="module")
def two_workers(tmp_path_factory) -> Iterator[dict]:
    """One ``cadence serve --workers 2`` for this module: the capacity run, then the restart-and-shutdown test,
    which ends it with SIGTERM (so it comes last). Yields the server's ``url``, ``log``, ``proc`` and ``metrics``
    (the parent's summing listener)."""
    mport = free_port()
    with cadence_serve("server.workers=2", f"server.metrics_listen=127.0.0.1:{mport}", "admission.max_sessions=16",
                       "admission.budget_gate=false", log_path=tmp_path_factory.mktemp("logs") / "serve.log") as srv:
        srv["metrics"] = f"http://127.0.0.1:{mport}"
        yield srv


def test_cadence_capacity_phone_reads_the_summed_metrics_of_two_workers(tmp_path, two_workers):
    import json
    import subprocess
    import sys

    from agent.capacity.corpus import recorded_prompts, write_ulaw_pack
    from testkit.servers import ROOT

    pack = write_ulaw_pack(tmp_path / "prompts.npz", recorded_prompts()[:20])
    srv = two_workers
    out = subprocess.run(
        [sys.executable, "-m", "agent.cli", "capacity", "--transport", "phone", "--url", srv["url"],
         "--metrics-url", srv["metrics"], "--prompts", str(pack), "--levels", "2",
         "--warmup", "2", "--hold", "8", "--max-wait", "20", "--all-levels", "--out-dir", str(tmp_path / "out"),
         "--write-config", str(tmp_path / "cap.toml")],
        cwd=ROOT, capture_output=True, text=True, timeout=180)
    print(out.stdout[-1500:], out.stderr[-1500:])
    result = json.loads((tmp_path / "out" / "capacity.json").read_text())
    assert result["server"]["ready"]["capacity"] == 16 and len(result["server"]["health"]["workers"]) == 2  # 8 + 8
    level = result["levels"][0]
    assert level["turns"] >= 2 and level["unanswered"] == 0, level["reasons"]
    assert level["worker_calls"] == [1, 1], level["worker_calls"]  # the two callers, one on each worker
    # the windows were reset through the parent at the hold and its summed page read at the end
    assert level["stage_tails"]["asr_final"] is not None and level["stage_tails"]["first_audio"] is not None


def test_a_browser_peers_later_requests_reach_its_worker_over_a_new_connection(two_workers):
    """A real aiortc caller's offer makes its peer in one worker; a trickled candidate for it over a fresh
    connection is handed to the other worker (the less loaded), which passes it on to the peer's worker."""
    import aiohttp

    from transports.webrtc_client import WebRTCCaller

    srv, murl = two_workers, two_workers["metrics"]
    candidate = {"candidate": "candidate:1 1 udp 2130706431 127.0.0.1 50000 typ host", "sdp_mid": "0",
                 "sdp_mline_index": 0}

    async def run() -> None:
        caller = WebRTCCaller(srv["url"])
        await caller.connect()
        try:
            await asyncio.sleep(0.5)  # the workers' reports: the offer's worker carries a call now
            rows = (await asyncio.to_thread(_health, murl))["workers"]
            owner = [r["index"] for r in rows if r["sessions"]]
            assert len(owner) == 1 and caller.pc_id and caller.pc_id.startswith(f"w{owner[0]}-"), (rows, caller.pc_id)
            handed = [r["connections_handed"] for r in rows]
            async with aiohttp.ClientSession() as http:
                async with http.patch(srv["url"] + "/api/offer",
                                      json={"pc_id": caller.pc_id, "candidates": [candidate]}) as r:
                    assert r.status == 200, await r.text()
                after = [r["connections_handed"] for r in (await asyncio.to_thread(_health, murl))["workers"]]
                other = 1 - owner[0]
                assert after[other] == handed[other] + 1 and after[owner[0]] == handed[owner[0]], (handed, after)
                for unknown in (f"w{owner[0]}-nobody", "w9-nobody"):  # the owner's answer; a tag of no worker
                    async with http.patch(srv["url"] + "/api/offer",
                                          json={"pc_id": unknown, "candidates": [candidate]}) as r:
                        assert r.status == 404, (unknown, await r.text())
                probe = f"http://127.0.0.1:{rows[owner[0]]['probe_port']}/api/offer"  # no key there: no new calls
                async with http.post(probe, json={"sdp": "v=0", "type": "offer"}) as r:
                    assert r.status == 403, await r.text()
                async with http.post(probe, json={"sdp": "v=0", "type": "offer", "pc_id": f"w{owner[0]}-new"}) as r:
                    assert r.status == 404, await r.text()  # naming an unknown peer does not start a call either
        finally:
            await caller.close()

    asyncio.run(run())


def test_two_workers_share_the_port_sum_metrics_restart_and_stop_cleanly(two_workers):
    """Ends the module's server (SIGTERM): the last test here."""
    from transports.phone.loopback_caller import LoopbackCaller

    murl = two_workers["metrics"]

    async def calls(url: str, n: int) -> list[dict]:
        """The workers' rows of /health with ``n`` calls connected, one every 0.2 s."""
        ws = url.replace("http://", "ws://") + "/phone/ws"
        callers = []
        try:
            for _ in range(n):
                callers.append(await LoopbackCaller(ws).connect())
                await asyncio.sleep(0.2)
            await asyncio.sleep(0.5)
            return (await asyncio.to_thread(_health, murl))["workers"]
        finally:
            for c in callers:
                await c.close()

    def idle() -> None:
        deadline = time.monotonic() + 10
        while any(w["sessions"] for w in _health(murl)["workers"]) and time.monotonic() < deadline:
            time.sleep(0.2)

    srv = two_workers
    parent = psutil.Process(srv["proc"].pid)
    idle()  # the capacity run's calls have ended: only this test's calls count below
    health = _health(murl)
    assert not any(w["sessions"] for w in health["workers"]), health
    pids = [w["pid"] for w in health["workers"]]
    assert len(set(pids)) == 2 and all(w["alive"] for w in health["workers"]), health
    children = parent.children(recursive=True)
    assert any("agent.llama_serve" in " ".join(c.cmdline()) for c in children), children
    assert {c.pid for c in children} >= set(pids)
    ready = httpx.get(f"{murl}/ready", timeout=10).json()
    assert ready["ready"] and ready["capacity"] == 16, ready  # 8 + 8

    assert httpx.post(f"{murl}/metrics/reset", timeout=10).status_code == 200
    before = _admitted(httpx.get(f"{murl}/metrics", timeout=10).text)  # the capacity run's calls (a counter)
    rows = asyncio.run(calls(srv["url"], 4))
    assert [r["sessions"] for r in rows] == [2, 2], f"4 callers not spread 2 + 2: {rows}"
    handed = [r["connections_handed"] - w["connections_handed"] for r, w in zip(rows, health["workers"], strict=True)]
    assert handed == [2, 2] and health["balance"] == "least_loaded", (rows, health)
    text = httpx.get(f"{murl}/metrics", timeout=10).text
    assert _admitted(text) - before == 4, (before, _admitted(text))
    assert re.search(r"^cadence_workers_scraped 2$", text, re.M), text[-400:]
    assert parse_metrics(text).gauges.get("cadence_sessions_capacity", 16) == 16

    os.kill(pids[0], signal.SIGKILL)  # a worker dies: the parent starts another in its place
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        w0 = _health(murl)["workers"][0]
        if w0["pid"] != pids[0] and w0["sessions"] is not None:
            break
        time.sleep(0.5)
    assert w0["pid"] != pids[0] and w0["restarts"] == 1 and w0["sessions"] is not None, w0
    idle()
    rows = asyncio.run(calls(srv["url"], 2))  # the restarted worker takes calls over its new pair
    assert [r["sessions"] for r in rows] == [1, 1], rows

    children = parent.children(recursive=True)
    t0 = time.monotonic()
    srv["proc"].send_signal(signal.SIGTERM)
    code = srv["proc"].wait(20)
    took = time.monotonic() - t0
    gone, alive = psutil.wait_procs(children, timeout=5)
    assert not alive, f"children outlived cadence serve --workers 2: {[c.pid for c in alive]}"
    assert code == 0, "".join(srv["log"][-30:])
    assert took < 8.0, f"shutdown took {took:.1f} s"


def test_kernel_balance_still_serves_calls_through_so_reuseport(tmp_path):
    """``server.balance = "kernel"``: the workers listen on the port themselves; a call is answered."""
    from transports.phone.loopback_caller import LoopbackCaller

    mport = free_port()
    with cadence_serve("server.workers=2", "server.balance=kernel", f"server.metrics_listen=127.0.0.1:{mport}",
                       "admission.budget_gate=false", log_path=tmp_path / "serve.log") as srv:
        murl = f"http://127.0.0.1:{mport}"

        async def one_call() -> int:
            caller = await LoopbackCaller(srv["url"].replace("http://", "ws://") + "/phone/ws").connect()
            try:
                await asyncio.sleep(0.5)
                return sum(w["sessions"] or 0 for w in (await asyncio.to_thread(_health, murl))["workers"])
            finally:
                await caller.close()

        assert asyncio.run(one_call()) == 1
        health = _health(murl)
        assert health["balance"] == "kernel" and all("connections_handed" not in w for w in health["workers"]), health
