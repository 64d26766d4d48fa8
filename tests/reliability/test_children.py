"""Child processes are supervised and never outlive the server (finding 5), on a real llama.cpp server.

Before: after the llama.cpp child was killed every later turn heard only the apology, the server
was never restarted and ``/ready`` stayed 200; ``cadence serve`` stopped with SIGTERM left the child
running; the managed server answered anyone on the machine.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time

import aiohttp
import httpx
import psutil
from aiohttp.test_utils import TestServer

from agent.config import Config
from agent.llm_server import embedded_llama_server
from agent.serve import CadenceServer
from testkit.servers import ROOT, cadence_serve
from tests.reliability.helpers import eventually


def _chat(base_url: str, key: str, model: str) -> httpx.Response:
    return httpx.post(f"{base_url}/chat/completions", timeout=60, headers={"Authorization": f"Bearer {key}"},
                      json={"model": model, "max_tokens": 4, "messages": [{"role": "user", "content": "Hi."}]})


async def test_a_killed_llm_server_is_restarted_and_ready_follows_it():
    llm = embedded_llama_server(threads=1, api_key="llm-k3y")
    await llm.astart()
    server = CadenceServer(Config(), llm_server=llm)
    supervisor = asyncio.create_task(llm.supervise(poll_s=0.2))
    try:
        assert httpx.get(f"{llm.base_url}/models", timeout=5).status_code == 401  # the key is demanded
        app = server.make_app()
        async with TestServer(app) as ts, aiohttp.ClientSession() as http:
            ready = str(ts.make_url("/ready"))
            async with http.get(ready) as r:
                assert r.status == 200
            old_pid = llm.process.pid
            os.kill(old_pid, signal.SIGKILL)  # dies mid-service

            async def status() -> int:
                async with http.get(ready) as r:
                    return r.status

            deadline = time.monotonic() + 3.0
            while (code := await status()) == 200 and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
            assert code == 503, "/ready stayed 200 with the LLM server dead"
            assert await eventually(lambda: llm.up, 60.0), "the LLM server was not restarted"
            assert await status() == 200
            assert llm.restarts == 1 and llm.process.pid != old_pid
            r = await asyncio.to_thread(_chat, llm.base_url, "llm-k3y", llm.model_id)
            assert r.status_code == 200 and r.json()["choices"][0]["message"]["content"] is not None
    finally:
        supervisor.cancel()
        llm.stop()


def _children(pid: int) -> list[psutil.Process]:
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []


def test_sigterm_says_goodbye_then_stops_cadence_serve_and_every_child():
    from transports.phone.loopback_caller import LoopbackCaller

    async def sigterm_mid_call(srv: dict) -> tuple[int, float, LoopbackCaller, float, float]:
        proc = srv["proc"]
        caller = await LoopbackCaller(srv["url"].replace("http://", "ws://") + "/phone/ws").connect()
        await asyncio.sleep(1.0)  # the call is up and streaming
        t0 = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        await asyncio.sleep(0.5)  # the goodbye is playing: load balancers must stop sending calls
        async with aiohttp.ClientSession() as http, http.get(srv["url"] + "/ready") as r:
            assert (r.status, (await r.json())["reason"]) == (503, "shutting down")
        await caller.wait_closed(15.0)
        closed_at = time.monotonic()
        code = await asyncio.to_thread(proc.wait, 20)
        took = time.monotonic() - t0
        await caller.close()
        return code, took, caller, t0, closed_at

    with cadence_serve("vad.turn=silence") as srv:
        children = _children(srv["proc"].pid)
        assert any("agent.llama_serve" in " ".join(c.cmdline()) for c in children), children
        code, took, caller, t0, closed_at = asyncio.run(sigterm_mid_call(srv))
    gone, alive = psutil.wait_procs(children, timeout=5)
    assert not alive, f"children outlived cadence serve: {[c.pid for c in alive]}"
    assert code == 0, "".join(srv["log"][-30:])
    assert took < 10.0, f"shutdown took {took:.1f} s"
    assert caller.close_code == 1001, f"the live call was closed with {caller.close_code}, not 'going away'"
    # The caller said nothing, so the bot said nothing before the signal; after it, the goodbye.
    assert caller.first_voiced_after(0.0) is not None and caller.first_voiced_after(0.0) >= t0
    goodbye = caller.audio_between(t0, closed_at)
    assert len(goodbye) / 2 / 8000 > 1.0, f"only {len(goodbye) / 16000:.2f} s of goodbye audio before the close"
    ends = [at for at, name in caller.inbound.marks if at >= t0 and name.endswith("-end")]
    assert ends and ends[-1] < closed_at, "the goodbye was cut off: no end-of-reply mark before the 1001 close"


def test_a_sigkilled_parent_leaves_no_llm_orphan():
    script = ("import sys, time; from agent.llm_server import embedded_llama_server; "
              "s = embedded_llama_server(threads=1).start(); print(s.process.pid, flush=True); time.sleep(600)")
    parent = subprocess.Popen([sys.executable, "-c", script], cwd=ROOT, stdout=subprocess.PIPE, text=True,
                              env=dict(os.environ, HF_HUB_OFFLINE="1"))
    try:
        child = psutil.Process(int(parent.stdout.readline()))
        assert child.is_running()
        parent.kill()  # no handler, no cleanup: only the kernel can end the child now
        parent.wait(timeout=10)
        gone, alive = psutil.wait_procs([child], timeout=5)
        assert not alive, "the LLM server outlived its SIGKILLed parent"
    finally:
        if parent.poll() is None:
            parent.kill()


def test_llm_nice_lowers_the_embedded_servers_cpu_priority() -> None:
    """``llm.nice``: the real llama.cpp server runs that much nicer than Cadence (the audio path goes first)."""
    with embedded_llama_server(threads=1, nice=7) as server:
        assert server.pid is not None
        assert os.getpriority(os.PRIO_PROCESS, server.pid) == min(19, os.getpriority(os.PRIO_PROCESS, 0) + 7)
        assert server.model_id  # it still starts and answers its health check
