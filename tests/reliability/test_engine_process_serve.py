"""``cadence serve`` with ``server.engine_process = true``: TTS and streaming Parakeet run in a supervised
engine process,
the goodbye at SIGTERM is still heard (synthesized over the socket), and no child outlives the server."""

from __future__ import annotations

import asyncio
import signal
import time

import psutil
import pytest

from testkit.servers import cadence_serve


def test_sigterm_with_an_engine_process_says_goodbye_and_leaves_no_child():
    from transports.phone.loopback_caller import LoopbackCaller

    async def sigterm_mid_call(srv: dict) -> tuple[int, float, float, LoopbackCaller]:
        caller = await LoopbackCaller(srv["url"].replace("http://", "ws://") + "/phone/ws").connect()
        await asyncio.sleep(1.0)
        t0 = time.monotonic()
        srv["proc"].send_signal(signal.SIGTERM)
        await caller.wait_closed(15.0)
        closed_at = time.monotonic()
        code = await asyncio.to_thread(srv["proc"].wait, 20)
        await caller.close()
        return code, t0, closed_at, caller

    # No LLM is needed for the goodbye: an unreachable one keeps the test off llama.cpp.
    with cadence_serve("server.engine_process=true", "tts.engine=piper", "asr.engine=parakeet", "vad.turn=silence",
                       "llm.base_url=http://127.0.0.1:9/v1") as srv:
        children = psutil.Process(srv["proc"].pid).children(recursive=True)
        assert any("agent.engine_server" in " ".join(c.cmdline()) for c in children), children
        code, t0, closed_at, caller = asyncio.run(sigterm_mid_call(srv))
    gone, alive = psutil.wait_procs(children, timeout=5)
    assert not alive, f"children outlived cadence serve: {[c.pid for c in alive]}"
    assert code == 0, "".join(srv["log"][-30:])
    log = "".join(srv["log"])
    assert "engine ready: tts=piper asr=parakeet" in log, log[-3000:]  # the engine process hosts both
    voiced = caller.first_voiced_after(0.0)
    assert voiced is not None and voiced >= t0, "no goodbye audio came through the engine process"
    assert len(caller.audio_between(t0, closed_at)) / 2 / 8000 > 1.0  # over a second of it


def test_workers_connect_to_the_engine_process_and_hold_no_tts_share():
    from agent.config import Config
    from agent.workers import worker_overrides

    cfg = Config()
    cfg.gpu.tts_fraction, cfg.gpu.asr_fraction = 0.36, 0.22
    own = dict(s.split("=", 1) for s in worker_overrides(cfg, 4, "http://127.0.0.1:1/v1", "m", 4242))
    assert "server.engine_socket" not in own and float(own["gpu.tts_fraction"]) == 0.09
    shared = dict(s.split("=", 1) for s in worker_overrides(cfg, 4, "http://127.0.0.1:1/v1", "m", 4242,
                                                            "/tmp/cadence-engine-x/tts.sock"))
    assert shared["server.engine_socket"] == "/tmp/cadence-engine-x/tts.sock"
    assert float(shared["gpu.tts_fraction"]) == 0.0 and float(shared["gpu.asr_fraction"]) == 0.055
    cfg.asr.engine = "parakeet"  # streaming Parakeet is the engine process's too
    shared = dict(s.split("=", 1) for s in worker_overrides(cfg, 4, "http://127.0.0.1:1/v1", "m", 4242,
                                                            "/tmp/cadence-engine-x/tts.sock"))
    assert float(shared["gpu.asr_fraction"]) == 0.0


@pytest.mark.slow  # two full worker processes and the engine process (~30 s on 2 cores)
def test_workers_share_one_engine_process_and_ready_follows_it():
    import httpx

    from agent.llm_server import free_port
    from testkit.servers import cadence_process

    probe = free_port()
    args = ["serve", "--port", "0"]
    for item in ("server.workers=2", "server.engine_process=true", "tts.engine=piper", "asr.engine=parakeet",
                 "vad.turn=silence", "llm.base_url=http://127.0.0.1:9/v1", f"server.metrics_listen=127.0.0.1:{probe}"):
        args += ["--set", item]
    with cadence_process(args, r"Cadence is ready: open (http://\S+?)/ ") as srv:
        children = psutil.Process(srv["proc"].pid).children(recursive=True)
        engines = [c for c in children if "agent.engine_server" in " ".join(c.cmdline())]
        workers = [c for c in children if "--worker-index" in c.cmdline()]
        assert len(engines) == 1 and len(workers) == 2, [c.cmdline() for c in children]
        ready = f"http://127.0.0.1:{probe}/ready"
        assert httpx.get(ready, timeout=10).status_code == 200
        engines[0].kill()
        deadline = time.monotonic() + 5
        while (r := httpx.get(ready, timeout=10)).status_code == 200 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert (r.status_code, r.json()["reason"]) == (503, "the TTS engine process is down (restarting)")
        time.sleep(1.0)  # the supervisor has respawned it (backoff 0.5 s): SIGTERM while it starts
        children = psutil.Process(srv["proc"].pid).children(recursive=True)
        assert any("agent.engine_server" in " ".join(c.cmdline()) for c in children if c.pid != engines[0].pid)
        srv["proc"].send_signal(signal.SIGTERM)
        assert srv["proc"].wait(30) == 0
    gone, alive = psutil.wait_procs(children, timeout=5)
    assert not alive, f"children outlived cadence serve --workers 2: {[c.pid for c in alive]}"


def test_asr_engine_process_of_its_own_transcribes_and_ready_follows_it():
    """``server.asr_engine_process``: streaming Parakeet in a second engine process; a caller's speech is
    transcribed there (its batcher ticks), /ready follows it, and SIGTERM leaves no child behind."""
    import httpx

    from agent.config import Config
    from agent.workers import worker_overrides
    from testkit.phone_prompts import pcm8k
    from transports.engine_link import Connection
    from transports.phone.loopback_caller import LoopbackCaller

    cfg = Config()
    cfg.asr.engine = "parakeet"
    own = dict(s.split("=", 1) for s in worker_overrides(cfg, 2, "http://127.0.0.1:1/v1", "m", 4242,
                                                         "/tmp/e/tts.sock", "/tmp/e/asr.sock"))
    assert own["server.asr_engine_socket"] == "/tmp/e/asr.sock" and float(own["gpu.asr_fraction"]) == 0.0

    async def speak_and_ask(url: str, asr_socket: str) -> dict:
        caller = await LoopbackCaller(url.replace("http://", "ws://") + "/phone/ws").connect()
        await caller.say(pcm8k("agent-pass"))
        await asyncio.sleep(1.5)
        conn = await Connection.open(asr_socket, 5.0)
        try:
            stats = await conn.call("stats")
        finally:
            await conn.aclose()
        await caller.close()
        return stats

    with cadence_serve("server.engine_process=true", "server.asr_engine_process=true", "tts.engine=piper",
                       "asr.engine=parakeet", "vad.turn=silence", "llm.base_url=http://127.0.0.1:9/v1") as srv:
        children = psutil.Process(srv["proc"].pid).children(recursive=True)
        engines = [c for c in children if "agent.engine_server" in " ".join(c.cmdline())]
        assert len(engines) == 2, [c.cmdline() for c in children]
        log = "".join(srv["log"])
        assert "engine ready: tts=piper on" in log and "engine ready: asr=parakeet on" in log, log[-3000:]
        asr_engine = next(c for c in engines if '"tts"' not in " ".join(c.cmdline()))
        socket = asr_engine.cmdline()[asr_engine.cmdline().index("--socket") + 1]
        stats = asyncio.run(speak_and_ask(srv["url"], socket))
        assert stats["asr"] and stats["stats"] == {}, stats  # the ASR engine has no TTS; its batcher ran
        assert stats["asr"]["ticks"] > 0 and stats["asr"]["windows"] > 0, stats["asr"]
        ready = srv["url"] + "/ready"
        assert httpx.get(ready, timeout=10).status_code == 200
        asr_engine.kill()
        deadline = time.monotonic() + 5
        while (r := httpx.get(ready, timeout=10)).status_code == 200 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert (r.status_code, r.json()["reason"]) == (503, "the ASR engine process is down (restarting)")
        srv["proc"].send_signal(signal.SIGTERM)
        assert srv["proc"].wait(30) == 0
    gone, alive = psutil.wait_procs(children, timeout=5)
    assert not alive, f"children outlived cadence serve: {[c.pid for c in alive]}"
