"""``phone.input_frame_ms``: the caller's 20 ms media messages enter the pipeline as longer frames, none lost."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import pytest
from aiohttp import web
from pipecat.frames.frames import Frame, InputAudioRawFrame
from pipecat.pipeline.pipeline import Pipeline
from pipecat.pipeline.worker import PipelineParams, PipelineWorker
from pipecat.processors.frame_processor import FrameDirection, FrameProcessor
from pipecat.workers.runner import WorkerRunner

from testkit.phone_prompts import pcm8k
from transports.phone.endpoint import PhoneEndpoint
from transports.phone.loopback_caller import LoopbackCaller
from transports.phone.options import PhoneOptions
from transports.phone.transport import PhoneTransport


class AudioRecorder(FrameProcessor):
    def __init__(self) -> None:
        super().__init__()
        self.frames: list[bytes] = []

    async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
        await super().process_frame(frame, direction)
        if isinstance(frame, InputAudioRawFrame):
            self.frames.append(frame.audio)
        await self.push_frame(frame, direction)


async def record_call(options: PhoneOptions, prompt: str) -> tuple[list[bytes], int]:
    """Input audio frames the pipeline saw while a caller said ``prompt``, and the media messages it sent."""
    recorder = AudioRecorder()

    async def run_call(transport: PhoneTransport, _sid: str, observers: Sequence[Any]) -> None:
        worker = PipelineWorker(Pipeline([transport.input(), recorder, transport.output()]),
                                params=PipelineParams(audio_in_sample_rate=16000), observers=list(observers),
                                enable_rtvi=False, idle_timeout_secs=None)

        @transport.event_handler("on_client_disconnected")
        async def _gone(_t: Any, _start: Any) -> None:
            await worker.cancel(reason="client disconnected")

        runner = WorkerRunner(handle_sigint=False, check_dangling_tasks=False)
        await runner.add_workers(worker)
        await runner.run()

    endpoint = PhoneEndpoint(run_call, options=options)
    app = web.Application()
    endpoint.add_routes(app)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        caller = await LoopbackCaller(f"ws://127.0.0.1:{runner.addresses[0][1]}{endpoint.options.path}").connect()
        await caller.say(pcm8k(prompt))
        await asyncio.sleep(0.3)
        await caller.hang_up()
        await asyncio.sleep(0.2)
        assert endpoint.recent, "the call was not recorded"
        sent = endpoint.recent[-1].stats.as_dict()["media_in"]
    finally:
        await runner.cleanup()
    return recorder.frames, sent


@pytest.mark.parametrize("frame_ms", [20.0, 40.0, 60.0])
async def test_caller_audio_enters_in_frames_of_the_configured_length_and_none_is_lost(frame_ms: float) -> None:
    frames, media = await record_call(PhoneOptions(input_frame_ms=frame_ms), "auth-thankyou")
    per_message = 2 * 16000 * 20 // 1000  # one 20 ms mu-law message, decoded to 16 kHz PCM
    want = 2 * int(16000 * frame_ms / 1000)
    assert frames, "no caller audio reached the pipeline"
    assert {len(f) for f in frames} == {want}, sorted({len(f) for f in frames})
    # every message's audio is in a frame but for the last, shorter-than-a-frame remainder
    assert media * per_message - want < sum(map(len, frames)) <= media * per_message
