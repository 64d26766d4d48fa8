"""``InlineWorkerObserver``: a call's observers told in place, as many times and in the order pipecat's proxies
would tell them, in a real pipeline run by pipecat's ``WorkerRunner``."""

from __future__ import annotations

import asyncio

import pytest
from pipecat.frames.frames import EndFrame, Frame, TextFrame
from pipecat.observers.base_observer import BaseObserver, FrameProcessed, FramePushed
from pipecat.pipeline.pipeline import Pipeline
from pipecat.pipeline.worker import PipelineWorker
from pipecat.processors.frame_processor import FrameDirection, FrameProcessor
from pipecat.workers.runner import WorkerRunner

from agent.inline_observer import InlineWorkerObserver, call_inline
from agent.observer_fanout import FanOutObserver


class Relay(FrameProcessor):
    async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
        await super().process_frame(frame, direction)
        await self.push_frame(frame, direction)


class Record(BaseObserver):
    """The texts pushed and processed, and the tasks that told it."""

    def __init__(self, every: bool = True) -> None:
        super().__init__(observe_every_push=every)
        self.pushed: list[str] = []
        self.processed: list[str] = []
        self.tasks: set[str] = set()

    async def on_push_frame(self, data: FramePushed) -> None:
        if isinstance(data.frame, TextFrame):
            self.pushed.append(data.frame.text)
            self.tasks.add(asyncio.current_task().get_name())

    async def on_process_frame(self, data: FrameProcessed) -> None:
        if isinstance(data.frame, TextFrame):
            self.processed.append(data.frame.text)


async def _run(observers: list[BaseObserver], inline: bool, late: BaseObserver | None = None) -> PipelineWorker:
    """Three texts through three relays; ``late`` is added with ``add_observer`` once the pipeline runs (as the
    goodbye watch is)."""
    fan = FanOutObserver(observers)
    worker = PipelineWorker(Pipeline([Relay(), Relay(), Relay()]), observers=[fan], idle_timeout_secs=None)
    if inline:
        call_inline(worker, fan)
    started = asyncio.Event()

    @worker.event_handler("on_pipeline_started")
    async def _started(worker, frame):
        started.set()

    async def feed() -> None:
        await asyncio.wait_for(started.wait(), 5)
        if late is not None:
            worker.add_observer(late)
        for text in "abc":
            await worker.queue_frame(TextFrame(text))
        await worker.queue_frame(EndFrame())

    runner = WorkerRunner(handle_sigint=False)
    await runner.add_workers(worker)
    await asyncio.wait_for(asyncio.gather(runner.run(), feed()), 10)
    return worker


def test_inline_observers_hear_every_event_the_proxied_ones_hear_in_place():
    proxied = [Record(), Record(every=False)]
    asyncio.run(_run(proxied, inline=False))
    inline = [Record(), Record(every=False)]
    asyncio.run(_run(inline, inline=True))
    assert len(proxied[0].pushed) > len(proxied[1].pushed) >= 3  # every hop vs the first push of each frame
    for a, b in zip(proxied, inline, strict=True):
        assert b.pushed == a.pushed and b.processed == a.processed
    # told by the processors' own tasks, not by an observer proxy's task
    assert not any("proxy" in t for t in inline[0].tasks) and any("proxy" in t for t in proxied[0].tasks)


def test_an_observer_added_while_running_is_told_through_its_proxy():
    proxied, inline = Record(), Record()
    asyncio.run(_run([Record()], inline=False, late=proxied))
    asyncio.run(_run([Record()], inline=True, late=inline))
    assert inline.pushed == proxied.pushed and inline.processed == proxied.processed and len(inline.processed) >= 3
    assert all("proxy" in t for t in inline.tasks)


def test_pipecats_own_observers_keep_their_proxy():
    async def check() -> None:
        fan = FanOutObserver([Record()])
        worker = PipelineWorker(Pipeline([Relay()]), observers=[fan], idle_timeout_secs=None)
        replacement = call_inline(worker, fan)
        assert isinstance(replacement, InlineWorkerObserver) and replacement.inline == [fan]
        assert worker.turn_tracking_observer in replacement._observers and fan not in replacement._observers

    asyncio.run(check())


def test_a_worker_without_the_observer_is_refused():
    async def check() -> None:
        worker = PipelineWorker(Pipeline([Relay()]), observers=[], idle_timeout_secs=None)
        with pytest.raises(RuntimeError, match="WorkerObserver holding"):
            call_inline(worker, FanOutObserver([]))

    asyncio.run(check())
