"""Streaming Parakeet in the engine process (asr.parakeet.remote): the same finals as in-process, partials
while speaking, the pipecat STT service unchanged on top, a clear error when the engine dies."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from pipecat.frames.frames import (
    InputAudioRawFrame,
    InterimTranscriptionFrame,
    TranscriptionFrame,
    VADUserStartedSpeakingFrame,
    VADUserStoppedSpeakingFrame,
)
from pipecat.pipeline.worker import PipelineParams
from pipecat.tests.utils import SleepFrame, run_test

from asr.options import ASRConfig
from asr.parakeet.remote import RemoteStreamBatcher
from asr.parakeet.stt_service import ParakeetSTTService
from asr.parakeet.tiny import synthetic_speech
from testkit.engine_server import start_engine_server, stop_engine_server
from transports.engine_link import EngineUnavailable


def _asr(tiny_dir: Path) -> ASRConfig:
    return ASRConfig(engine="parakeet", model=str(tiny_dir), device="cpu", dtype="float32", encoder_backend="eager",
                     chunk_ms=160, partial_interval_ms=320)


def _start(path: str, asr: ASRConfig) -> subprocess.Popen:
    from dataclasses import asdict

    return start_engine_server(path, {"asr": asdict(asr)})


_stop = stop_engine_server


@pytest.fixture(scope="module")
def engine_socket(tiny_dir) -> Iterator[str]:
    with tempfile.TemporaryDirectory(prefix="cad-asr-") as d:
        path = str(Path(d) / "engine.sock")
        proc = _start(path, _asr(tiny_dir))
        yield path
        _stop(proc)
        assert proc.returncode == 0


def _heard(clip: np.ndarray) -> np.ndarray:
    """What the service hears: 16-bit PCM back to float."""
    return (np.clip(clip, -1, 1) * 32767).astype(np.int16).astype(np.float32) / 32768.0


async def _stream(batcher, clip: np.ndarray, partials: list, sessions: list | None = None) -> object:
    session = batcher.open(on_partial=partials.append)
    if sessions is not None:
        sessions.append(session)
    for lo in range(0, len(clip), 320):  # 20 ms frames, as the transport delivers them
        batcher.feed(session, clip[lo: lo + 320])
        await asyncio.sleep(0.002)
    try:
        return await batcher.finalize(session)
    finally:
        batcher.close(session)


async def test_same_final_as_in_process(engine_socket, tiny_dir):
    from asr.parakeet.shared_engine import shared_parakeet_batcher

    local = shared_parakeet_batcher(_asr(tiny_dir))
    remote = RemoteStreamBatcher(engine_socket)
    for seed in (31, 32):
        clip = _heard(synthetic_speech(1.6, seed=seed))
        local_partials: list = []
        remote_partials: list = []
        expected = await _stream(local, clip, local_partials)
        sessions: list = []
        got = await _stream(remote, clip, remote_partials, sessions)
        assert got.final and got.text == expected.text and got.tokens == expected.tokens
        # the 20 ms frames went out 100 ms at a time (the last ones with the final)
        assert sessions[0].fed == 80 and sessions[0].feeds_sent == 16
        assert got.frames == expected.frames and got.audio_s == pytest.approx(expected.audio_s)
        assert remote_partials and not any(p.final for p in remote_partials)  # partials came back while feeding
    await remote.aclose()


async def test_pipecat_stt_service_over_the_socket(engine_socket, tiny_dir):
    from asr.parakeet.engine import ParakeetEngine

    clip = synthetic_speech(1.6, seed=21)
    engine = ParakeetEngine.from_pretrained(tiny_dir)
    expected = engine.tokenizer.decode(engine.transcribe_tokens([_heard(clip)])[0].tokens).strip()
    pcm = (np.clip(clip, -1, 1) * 32767).astype(np.int16)
    frames = [VADUserStartedSpeakingFrame()]
    for lo in range(0, len(pcm), 320):
        # in real time, as a caller speaks: each partial (every 640 ms of audio) has the time a live call gives it
        # to come back before the VAD stop (at 5x real time a loaded CI box returned them after the final: dropped)
        frames += [InputAudioRawFrame(audio=pcm[lo: lo + 320].tobytes(), sample_rate=16000, num_channels=1),
                   SleepFrame(sleep=0.02)]
    frames += [VADUserStoppedSpeakingFrame(stop_secs=0.2), SleepFrame(sleep=0.8)]
    service = ParakeetSTTService(RemoteStreamBatcher(engine_socket), preroll_s=0.0, audio_passthrough=False)
    down, _ = await run_test(service, frames_to_send=frames, pipeline_params=PipelineParams(audio_in_sample_rate=16000))
    assert [f.text for f in down if isinstance(f, TranscriptionFrame)] == [expected]
    assert any(isinstance(f, InterimTranscriptionFrame) for f in down)


async def test_a_dead_engine_fails_finalize_at_once(tiny_dir):
    with tempfile.TemporaryDirectory(prefix="cad-asr-") as d:
        path = str(Path(d) / "doomed.sock")
        proc = await asyncio.to_thread(_start, path, _asr(tiny_dir))
        try:
            remote = RemoteStreamBatcher(path)
            session = remote.open()
            remote.feed(session, np.zeros(1600, dtype=np.float32))
            await asyncio.sleep(0.2)
            os.killpg(proc.pid, signal.SIGKILL)
            await asyncio.sleep(0.2)
            with pytest.raises(EngineUnavailable):
                await asyncio.wait_for(remote.finalize(session), 5.0)
        finally:
            _stop(proc)


async def test_a_fresh_partial_asked_over_the_link_is_the_final_pass_of_the_audio_so_far(engine_socket):
    """``request_partial(fresh=True)`` (the caller's pause) crosses the link: the engine decodes the whole utterance
    so far afresh, the tokens a final gives for that audio."""
    remote = RemoteStreamBatcher(engine_socket)
    clip = _heard(synthetic_speech(1.0, seed=21))
    got: asyncio.Future = asyncio.get_running_loop().create_future()
    paused = remote.open(on_partial=lambda result: result.fresh and not got.done() and got.set_result(result))
    try:
        remote.feed(paused, clip)
        remote.request_partial(paused, fresh=True)
        partial = await asyncio.wait_for(got, 30)
    finally:
        remote.close(paused)
    final = await _stream(remote, clip, [])
    assert partial.tokens and partial.tokens == final.tokens
