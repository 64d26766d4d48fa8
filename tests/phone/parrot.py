"""A small real pipeline for transport tests: Silero VAD + a bot that answers with a fixed recording.

No models beyond the VAD: the phone transport, its pacing, marks, barge-in and protocol handling
run for real on an in-process aiohttp server, in milliseconds of start-up.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

from aiohttp import web
from pipecat.audio.vad.silero import SileroVADAnalyzer
from pipecat.audio.vad.vad_analyzer import VADParams
from pipecat.frames.frames import (
    Frame,
    TTSAudioRawFrame,
    TTSStartedFrame,
    TTSStoppedFrame,
    VADUserStartedSpeakingFrame,
    VADUserStoppedSpeakingFrame,
)
from pipecat.pipeline.pipeline import Pipeline
from pipecat.pipeline.worker import PipelineParams, PipelineWorker
from pipecat.processors.audio.vad_processor import VADProcessor
from pipecat.processors.frame_processor import FrameDirection, FrameProcessor
from pipecat.workers.runner import WorkerRunner

from transports.phone.barge_in import BargeInDetector
from transports.phone.endpoint import PhoneEndpoint
from transports.phone.options import PhoneOptions
from transports.phone.transport import PhoneTransport


class ParrotBot(FrameProcessor):
    """Answers every caller turn with ``reply`` (16 kHz PCM, streamed in 100 ms TTS frames).

    ``stall``: (after_s, for_s): once ``after_s`` of the reply is out, the TTS stalls ``for_s`` seconds
    (slower than real time for a moment, so the far end runs dry: an underrun)."""

    def __init__(self, reply: bytes, rate: int = 16000, stall: tuple[float, float] | None = None):
        super().__init__()
        self._reply, self._rate, self._stall = reply, rate, stall
        self._task: asyncio.Task | None = None

    async def process_frame(self, frame: Frame, direction: FrameDirection):
        await super().process_frame(frame, direction)
        await self.push_frame(frame, direction)
        if isinstance(frame, VADUserStartedSpeakingFrame):
            if self._task is not None:
                self._task.cancel()
            await self.broadcast_interruption()
        elif isinstance(frame, VADUserStoppedSpeakingFrame):
            self._task = asyncio.create_task(self._speak())

    async def _speak(self) -> None:
        step = self._rate // 10 * 2
        await self.push_frame(TTSStartedFrame())
        stalled = self._stall is None
        for i in range(0, len(self._reply), step):
            await self.push_frame(TTSAudioRawFrame(self._reply[i:i + step], self._rate, 1))
            await asyncio.sleep(0.02)  # a TTS faster than real time, as the real ones are
            if not stalled and (i + step) / 2 / self._rate >= self._stall[0]:
                stalled = True
                await asyncio.sleep(self._stall[1])
        await self.push_frame(TTSStoppedFrame())


async def run_pipeline(transport: PhoneTransport, processors: Sequence[FrameProcessor],
                       observers: Sequence[Any]) -> None:
    """Run ``transport.input() -> processors -> transport.output()`` until the caller hangs up."""
    pipeline = Pipeline([transport.input(), *processors, transport.output()])
    worker = PipelineWorker(pipeline, params=PipelineParams(audio_in_sample_rate=16000),
                            observers=list(observers), enable_rtvi=False, idle_timeout_secs=None)

    @transport.event_handler("on_client_disconnected")
    async def _gone(_t: Any, _start: Any) -> None:
        await worker.cancel(reason="client disconnected")

    runner = WorkerRunner(handle_sigint=False, check_dangling_tasks=False)
    await runner.add_workers(worker)
    await runner.run()


def parrot_runner(reply: bytes, stall: tuple[float, float] | None = None):
    async def run_call(transport: PhoneTransport, _sid: str, observers: Sequence[Any]) -> None:
        vad = VADProcessor(vad_analyzer=SileroVADAnalyzer(params=VADParams(stop_secs=0.3)))
        await run_pipeline(transport, [vad, ParrotBot(reply, stall=stall)], observers)

    return run_call


@asynccontextmanager
async def parrot_server(reply: bytes, *, gate: Any = None, options: PhoneOptions | None = None,
                        barge_in: bool = True, stall: tuple[float, float] | None = None,
                        ) -> AsyncIterator[tuple[str, PhoneEndpoint]]:
    """Serve the parrot bot on loopback; yields (ws url, endpoint)."""
    async with phone_server(parrot_runner(reply, stall), gate=gate, options=options,
                            barge_in=barge_in) as served:
        yield served


@asynccontextmanager
async def phone_server(run_call: Any, *, gate: Any = None, options: PhoneOptions | None = None,
                       barge_in: bool = True) -> AsyncIterator[tuple[str, PhoneEndpoint]]:
    """Serve ``run_call`` (a PhoneEndpoint call runner) on loopback; yields (ws url, endpoint)."""
    endpoint = PhoneEndpoint(run_call, gate=gate, options=options,
                             barge_in_factory=(lambda: BargeInDetector()) if barge_in else None)
    app = web.Application()
    endpoint.add_routes(app)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        yield f"ws://127.0.0.1:{port}{endpoint.options.path}", endpoint
    finally:
        await runner.cleanup()
