"""The shutdown goodbye cuts an answer in progress, then is spoken whole (issue 15, shutdown).

A real phone call on loopback (aiohttp endpoint, ``websockets`` caller in real time) to a pipeline
with the real TTS stage on the embedded Piper voice. The bot is mid-way through a long answer when
the goodbye comes: the caller must get ``clear`` (its playout of the answer dropped), then the
goodbye's audio, and ``say_goodbye`` must return only once that audio has been sent.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from typing import Any

from aiohttp import web
from pipecat.frames.frames import TTSSpeakFrame
from pipecat.pipeline.pipeline import Pipeline
from pipecat.pipeline.worker import PipelineParams, PipelineWorker
from pipecat.workers.runner import WorkerRunner

from agent.config import Config
from agent.goodbye import say_goodbye
from agent.models import piper_voice
from tests.reliability.helpers import eventually
from transports.phone.endpoint import PhoneEndpoint
from transports.phone.loopback_caller import LoopbackCaller
from transports.phone.transport import PhoneTransport
from tts.engines import create_engine
from tts.service import CadenceTTSService

ANSWER = ("Well, there are many things to say about that. First of all, the weather today is mild and "
          "pleasant across most of the region. Later this week a cold front arrives from the north, "
          "bringing rain and strong winds to the coast. By the weekend it should clear up again.")


def voiced_s(caller: LoopbackCaller, t0: float, t1: float = float("inf")) -> float:
    return sum(len(p) for at, p in caller.inbound.media if t0 <= at < t1 and caller.voiced(p)) / 8000.0


async def test_goodbye_interrupts_an_answer_in_progress_and_is_sent_whole():
    engine = create_engine(Config().tts, piper_voice)
    workers: list[PipelineWorker] = []

    async def run_call(transport: PhoneTransport, _sid: str, _observers: Sequence[Any]) -> None:
        pipeline = Pipeline([transport.input(), CadenceTTSService(engine), transport.output()])
        worker = PipelineWorker(pipeline, params=PipelineParams(audio_in_sample_rate=16000,
                                                                audio_out_sample_rate=8000),
                                enable_rtvi=False, idle_timeout_secs=None)

        @transport.event_handler("on_client_disconnected")
        async def _gone(_t: Any, _start: Any) -> None:
            await worker.cancel(reason="client disconnected")

        workers.append(worker)
        runner = WorkerRunner(handle_sigint=False, check_dangling_tasks=False)
        await runner.add_workers(worker)
        await runner.run()

    endpoint = PhoneEndpoint(run_call)
    app = web.Application()
    endpoint.add_routes(app)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    caller = None
    try:
        url = f"ws://127.0.0.1:{runner.addresses[0][1]}{endpoint.options.path}"
        caller = await LoopbackCaller(url).connect()
        assert await eventually(lambda: bool(workers), 5.0), "the call never got a pipeline"
        worker = workers[0]
        t_answer = time.monotonic()
        await worker.queue_frame(TTSSpeakFrame(ANSWER))  # ~15 s of speech
        assert await eventually(lambda: voiced_s(caller, t_answer) >= 1.0, 15.0), "the answer never played"

        t0 = time.monotonic()
        said = await say_goodbye(worker, "Goodbye.", 4.0, "test")
        t1 = time.monotonic()
        assert said, "the goodbye was not sent within 4 s"
        clears = [at for at in caller.inbound.clears if at >= t0]
        assert clears, "the answer in progress was not cleared from the caller's playout"
        goodbye = voiced_s(caller, clears[0], t1 + 0.5)
        assert 0.3 < goodbye < 2.5, f"{goodbye:.2f} s of audio after the clear: not just the goodbye"
        ends = [at for at, name in caller.inbound.marks if at >= clears[0] and name.endswith("-end")]
        assert ends and ends[0] <= t1 + 0.1, "say_goodbye returned before the goodbye's audio was sent"
        await asyncio.sleep(0.5)
        assert voiced_s(caller, t1 + 0.1) == 0.0, "the answer resumed after the goodbye"
    finally:
        if caller is not None:
            await caller.close()
        await runner.cleanup()


async def test_a_later_hop_of_the_interrupted_answers_stop_does_not_count_as_the_goodbye_said():
    """The order CI met: the goodbye queued, the interrupted answer's stop (its upstream copy then hops on through
    the pipeline), the goodbye's start; only the goodbye's own stop counts."""
    from pipecat.frames.frames import BotStartedSpeakingFrame, BotStoppedSpeakingFrame
    from pipecat.observers.base_observer import FramePushed
    from pipecat.processors.frame_processor import FrameDirection, FrameProcessor

    from agent.goodbye import GoodbyeWatch

    speak = TTSSpeakFrame("Goodbye.")
    watch = GoodbyeWatch(speak)
    assert not watch.observe_every_push
    a, b = FrameProcessor(), FrameProcessor()
    answer_stopped = BotStoppedSpeakingFrame()

    async def push(frame, first_push: bool = True) -> None:
        await watch.on_push_frame(FramePushed(a, b, frame, FrameDirection.UPSTREAM, 0, first_push))

    await push(speak)
    await push(answer_stopped)
    await push(BotStartedSpeakingFrame())
    await push(answer_stopped, first_push=False)  # the answer's stop, one hop further upstream
    assert not watch.said.is_set()
    await push(BotStoppedSpeakingFrame())
    assert watch.said.is_set()
