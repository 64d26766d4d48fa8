"""The supervised engine process (agent.engine_process): ready after warm-up, /ready 503 while it is
dead, restarted with its sessions reconnecting, and nothing left behind when stopped."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from pathlib import Path

import aiohttp
import psutil
import pytest
from aiohttp.test_utils import TestServer

from agent.config import Config
from agent.engine_process import EngineProcessError, ManagedEngineProcess
from agent.serve import CadenceServer
from tests.gputts.conftest import g2p_kind
from tts.remote.client import EngineUnavailable, RemoteTTSEngine

SPEC = {"tts": {"engine": "kokoro"}, "kokoro": {"tiny": True, "device": "cpu", "warmup": False, "g2p": g2p_kind()}}


async def _eventually(check, timeout_s: float) -> bool:
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if await check():
            return True
        await asyncio.sleep(0.05)
    return False


async def test_killed_engine_process_is_restarted_and_ready_follows_it():
    engine = ManagedEngineProcess(SPEC, start_timeout_s=120, env=dict(os.environ, OMP_NUM_THREADS="1"))
    await engine.astart()
    supervisor = asyncio.create_task(engine.supervise(poll_s=0.1))
    socket_dir = Path(engine.socket_path).parent
    server = CadenceServer(Config(), engine_proc=engine)
    remote = RemoteTTSEngine(engine.socket_path)
    try:
        assert engine.info["name"] == "kokoro" and engine.info["pid"] == engine.pid
        assert engine.peaks == {}  # measured on CUDA only
        assert len([p async for p in remote.synthesize_stream("Hello there. Bye.")]) == 2
        async with TestServer(server.make_app()) as ts, aiohttp.ClientSession() as http:
            async def status() -> int:
                async with http.get(str(ts.make_url("/ready"))) as r:
                    return r.status

            assert await status() == 200
            old_pid = engine.pid
            os.killpg(old_pid, signal.SIGKILL)
            assert await _eventually(lambda: _is(status, 503), 3.0), "/ready stayed 200 with the engine dead"
            with pytest.raises(EngineUnavailable):  # a session's next turn: a clear error, at once
                await asyncio.wait_for(remote.synthesize_stream("Hello.").__anext__(), 5.0)
            assert await _eventually(lambda: _is(status, 200), 120.0), "the engine process was not restarted"
            assert engine.restarts == 1 and engine.pid != old_pid
            assert len([p async for p in remote.synthesize_stream("Back again.")]) == 1  # reconnected
        pid = engine.pid
    finally:
        supervisor.cancel()
        engine.stop()
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    assert not socket_dir.exists()


async def _is(status, code: int) -> bool:
    return await status() == code


async def test_an_engine_that_cannot_start_is_a_clear_error():
    engine = ManagedEngineProcess({"tts": {"engine": "nonsense"}}, start_timeout_s=60)
    with pytest.raises(EngineProcessError, match="exited with code 1"):
        await engine.astart()
    assert engine.process is None
