"""An ended call's pipeline is freed by reference counting once ``break_call_cycles`` has run: a real pipecat
pipeline run to its end by ``WorkerRunner``, with the cyclic collector off."""

from __future__ import annotations

import asyncio
import gc
import weakref

from pipecat.frames.frames import EndFrame, Frame, TextFrame
from pipecat.pipeline.pipeline import Pipeline
from pipecat.pipeline.worker import PipelineWorker
from pipecat.processors.frame_processor import FrameDirection, FrameProcessor
from pipecat.workers.runner import WorkerRunner

from agent.call_teardown import break_call_cycles


class Relay(FrameProcessor):
    async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
        await super().process_frame(frame, direction)
        await self.push_frame(frame, direction)


class Recorder(Relay):
    """A stage its owner reads after the call (as a test reads a transport's output)."""

    def __init__(self) -> None:
        super().__init__()
        self.texts: list[str] = []

    async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
        if isinstance(frame, TextFrame):
            self.texts.append(frame.text)
        await super().process_frame(frame, direction)


def _call(recorder: Recorder, teardown: bool) -> list[weakref.ref]:
    """Run one call to its end; weak references to what the session built."""
    async def main() -> tuple[PipelineWorker, WorkerRunner, list[Relay]]:
        relays = [Relay(), Relay()]
        worker = PipelineWorker(Pipeline([relays[0], recorder, relays[1]]), idle_timeout_secs=None)
        runner = WorkerRunner(handle_sigint=False)
        await runner.add_workers(worker)
        for text in ("hello", "there"):
            await worker.queue_frame(TextFrame(text))
        await worker.queue_frame(EndFrame())
        await asyncio.wait_for(runner.run(), 10)
        return worker, runner, relays

    worker, runner, relays = asyncio.run(main())
    refs = [weakref.ref(o) for o in (worker, runner, *relays)]
    if teardown:
        break_call_cycles(worker, owned=(runner,), borrowed=(recorder,))
    return refs


def test_an_ended_call_is_freed_without_the_cyclic_collector_and_its_borrowed_stage_stays_readable():
    gc.collect()
    gc.disable()
    try:
        kept = Recorder()
        alive_without = [r for r in _call(kept, teardown=False) if r() is not None]
        recorder = Recorder()
        alive_with = [r() for r in _call(recorder, teardown=True) if r() is not None]
    finally:
        gc.enable()
        gc.collect()
    assert alive_without, "a pipeline left no cycle: this test would not see the teardown work"
    assert alive_with == [], f"still alive after the teardown: {alive_with}"
    assert recorder.texts == ["hello", "there"]  # the borrowed stage keeps its own attributes
    assert str(recorder).startswith("Recorder")
