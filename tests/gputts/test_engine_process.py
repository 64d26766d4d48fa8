"""Kokoro in an engine process (tts.remote): same audio as in-process, batching across streams,
cancellation reaching the engine's queue, a clear error when the process dies, and the pipecat TTS
service end to end over the socket. Real processes, real tiny Kokoro on the CPU."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from pipecat.frames.frames import ErrorFrame, TTSAudioRawFrame, TTSSpeakFrame
from pipecat.pipeline.worker import PipelineParams
from pipecat.tests.utils import SleepFrame, run_test

from testkit.engine_server import engine_command, start_engine_server, stop_engine_server
from tests.gputts.conftest import g2p_kind
from tts.remote.client import EngineUnavailable, RemoteTTSEngine, hello
from tts.service import CadenceTTSService

KOKORO = {"tiny": True, "device": "cpu", "max_batch": 16, "warmup": False, "first_clause_words": 3}
THREE_CLAUSES = "Sure, I can help. Your order ships today. It should arrive on Friday."


def start_engine_process(path: str, extra: tuple[str, ...] = ()) -> subprocess.Popen:
    """``python -m agent.engine_server`` with the tiny Kokoro; returns once its ``hello`` answers."""
    return start_engine_server(path, {"tts": {"engine": "kokoro"}, "kokoro": {**KOKORO, "g2p": g2p_kind()}},
                               extra=extra)


stop = stop_engine_server


@pytest.fixture(scope="module")
def socket_dir() -> Iterator[str]:
    with tempfile.TemporaryDirectory(prefix="cad-eng-") as d:  # short: Unix socket paths are capped at 107 bytes
        yield d


@pytest.fixture(scope="module")
def engine_process(socket_dir: str) -> Iterator[tuple[subprocess.Popen, str]]:
    path = str(Path(socket_dir) / "engine.sock")
    proc = start_engine_process(path, ("--gc-freeze",))  # as cadence serve starts it (runtime.gc_freeze)
    yield proc, path
    stop(proc)
    assert proc.returncode == 0  # SIGTERM is a clean exit
    assert not Path(path).exists()  # and it removed its socket


@pytest.fixture
def remote(engine_process) -> RemoteTTSEngine:
    return RemoteTTSEngine.connect(engine_process[1])


async def _collect(engine, text: str, **kw) -> list[bytes]:
    return [pcm async for pcm in engine.synthesize_stream(text, **kw)]


async def _wait(predicate, timeout: float = 20.0) -> None:
    end = time.monotonic() + timeout
    while not await predicate():
        assert time.monotonic() < end, "timed out"
        await asyncio.sleep(0.02)


def test_hello_names_the_engine(engine_process):
    info = hello(engine_process[1])
    assert info["name"] == "kokoro" and info["sample_rate"] == 24000 and info["pid"] == engine_process[0].pid
    # the warm heap (torch, the model) is out of the collector's reach: the tests below run on it frozen
    deadline = time.monotonic() + 10
    while info["gc_frozen"] == 0 and time.monotonic() < deadline:  # hello answers from just before the freeze
        time.sleep(0.05)
        info = hello(engine_process[1])
    assert info["gc_frozen"] > 50_000, info


def test_engine_process_freezes_its_heap_as_the_runtime_says():
    from agent.config import Config

    config = Config()
    config.tts.engine = "kokoro"
    assert "--gc-freeze" in engine_command(config)
    config.runtime.gc_freeze = False
    assert "--gc-freeze" not in engine_command(config)


async def test_same_pcm_as_in_process(remote):
    import torch

    from tts.kokoro.engine import KokoroEngine
    from tts.kokoro.options import KokoroOptions

    # the engine process runs torch on one thread (OMP_NUM_THREADS=1, testkit.engine_server): so does the
    # reference, or the reductions split differently and the last bits differ (the test alone, on 2 cores)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    local = KokoroEngine(KokoroOptions(**KOKORO, g2p=g2p_kind()))
    try:
        expected = await _collect(local, THREE_CLAUSES, seed=11)
    finally:
        local.close()
        torch.set_num_threads(threads)
    got = await _collect(remote, THREE_CLAUSES, seed=11)
    assert len(got) == 3
    assert got == expected  # byte for byte, clause by clause


async def test_concurrent_streams_batch_in_the_engine(remote):
    before = (await remote.call("stats"))["stats"]
    await remote.call("hold")  # every stream's first clause queues before a tick
    try:
        tasks = [asyncio.ensure_future(_collect(remote, f"Caller {n} asks about the order.")) for n in range(6)]
        await _wait(lambda: _pending_at_least(remote, 6))
    finally:
        await remote.call("release")
    outputs = await asyncio.gather(*tasks)
    after = (await remote.call("stats"))["stats"]
    assert all(len(out) == 1 and out[0] for out in outputs)
    assert after["ticks"] == before["ticks"] + 1 and after["last_batch"] == 6
    assert after["batch_sizes"].get("6", 0) >= 1


async def _pending_at_least(remote: RemoteTTSEngine, n: int) -> bool:
    return (await remote.call("stats"))["stats"]["pending"] >= n


async def test_cancelled_stream_drops_its_queued_clause(remote):
    before = (await remote.call("stats"))["stats"]["cancelled"]
    await remote.call("hold")
    try:
        task = asyncio.ensure_future(_collect(remote, THREE_CLAUSES))
        await _wait(lambda: _pending_at_least(remote, 1))
        task.cancel()  # the caller barged in while its first clause was queued in the engine process
        with pytest.raises(asyncio.CancelledError):
            await task

        async def withdrawn() -> bool:
            stats = (await remote.call("stats"))["stats"]
            return stats["pending"] == 0 and stats["cancelled"] == before + 1

        await _wait(withdrawn)
    finally:
        await remote.call("release")
    assert len(await _collect(remote, "Still here.")) == 1  # the engine keeps serving


async def test_pipecat_service_over_the_socket(remote):
    params = PipelineParams(audio_out_sample_rate=24000)
    down, _ = await run_test(CadenceTTSService(remote), frames_to_send=[TTSSpeakFrame(THREE_CLAUSES),
                                                                        SleepFrame(sleep=0.2)],
                             pipeline_params=params)
    audio = [f for f in down if isinstance(f, TTSAudioRawFrame)]
    assert audio and sum(len(f.audio) for f in audio) > 24000
    assert not [f for f in down if isinstance(f, ErrorFrame)]


def test_sync_synthesize(remote):
    pieces = list(remote.synthesize("Hello there. Goodbye now."))
    assert len(pieces) == 2 and all(pieces)


async def test_killed_engine_is_a_clear_error_not_a_hang(socket_dir):
    path = str(Path(socket_dir) / "doomed.sock")
    proc = await asyncio.to_thread(start_engine_process, path)
    remote = RemoteTTSEngine(path)
    try:
        await remote.call("hold")  # the stream waits in the engine's queue when the process dies
        task = asyncio.ensure_future(_collect(remote, THREE_CLAUSES))
        await _wait(lambda: _pending_at_least(remote, 1))
        os.killpg(proc.pid, signal.SIGKILL)
        t0 = time.monotonic()
        with pytest.raises(EngineUnavailable, match="went away"):
            await asyncio.wait_for(task, 5.0)
        assert time.monotonic() - t0 < 2.0
        with pytest.raises(EngineUnavailable):  # a new stream fails at once too (refused, or reset while it exits)
            await asyncio.wait_for(_collect(remote, "Hello."), 5.0)
    finally:
        stop(proc)
