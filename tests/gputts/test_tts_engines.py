"""``server.tts_engines = N``: the server starts N Kokoro engine processes, the session side spreads clause
streams over them by open streams, and a stream goes to a live engine when one is down. Real processes, the
tiny Kokoro on the CPU."""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path

import psutil

import agent.engine_process as engine_process
from agent.config import Config
from agent.serve import CadenceServer
from tests.gputts.conftest import g2p_kind
from tts.remote.client import RemoteTTSEngine

SPEC = {"tts": {"engine": "kokoro"},
        "kokoro": {"tiny": True, "device": "cpu", "warmup": False, "max_batch": 16, "g2p": g2p_kind()}}


async def _utterances(remote: RemoteTTSEngine, engine: int) -> int:
    return int((await remote.call("stats", engine))["stats"]["utterances"])


async def test_streams_spread_over_the_tts_engines_and_avoid_a_dead_one(monkeypatch):
    monkeypatch.setattr(engine_process, "engine_spec", lambda _config, _hosts: SPEC)
    cfg = Config()
    cfg.server.engine_process = True
    cfg.server.tts_engines = 2
    server = CadenceServer(cfg)
    await server.start_engine_process()
    procs = server.engine_procs
    try:
        paths = cfg.server.engine_socket.split(",")
        assert len(paths) == 2 and len(set(paths)) == 2 and len(procs) == 2
        assert all(p.up for p in procs) and len({p.pid for p in procs}) == 2
        remote = RemoteTTSEngine(cfg.server.engine_socket)
        assert remote.paths == paths

        async def speak(text: str) -> int:
            return len([pcm async for pcm in remote.synthesize_stream(text)])

        before = [await _utterances(remote, i) for i in range(2)]
        pieces = await asyncio.gather(*(speak(f"Hello caller {i}. Your order ships today.") for i in range(6)))
        assert pieces == [2] * 6
        counts = [await _utterances(remote, i) - before[i] for i in range(2)]
        assert counts == [6, 6], counts  # six streams of two clauses opened at once: three on each
        assert remote.open_streams == [0, 0]

        os.killpg(procs[0].pid, signal.SIGKILL)  # no supervisor here: it stays down
        await asyncio.to_thread(procs[0].process.wait, 10)
        await remote.aclose()  # the dead engine's connection is gone; the next stream connects afresh
        assert [await speak("Still here. Thanks.") for _ in range(3)] == [2, 2, 2]
        assert await _utterances(remote, 1) == before[1] + counts[1] + 6
        await remote.aclose()
    finally:
        pids = [p.pid for p in procs if p.pid]
        dirs = [Path(p).parent for p in cfg.server.engine_socket.split(",") if p]
        server.stop_children()
    assert all(not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE for pid in pids)
    assert not any(d.exists() for d in dirs)


def test_tts_engines_below_one_is_refused(capsys):
    from agent.cli import main

    assert main(["serve", "--set", "server.tts_engines=0"]) == 2
    assert "server.tts_engines must be >= 1, got 0" in capsys.readouterr().err
