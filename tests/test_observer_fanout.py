"""``FanOutObserver``: a call's observers behind one pipecat proxy, each told what it asked for, in a real
pipeline (``pipecat.tests.utils.run_test``)."""

from __future__ import annotations

import asyncio

from pipecat.frames.frames import Frame, TextFrame
from pipecat.observers.base_observer import BaseObserver, FrameProcessed, FramePushed
from pipecat.processors.frame_processor import FrameDirection, FrameProcessor
from pipecat.tests.utils import run_test

from agent.observer_fanout import FanOutObserver


class Relay(FrameProcessor):
    async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
        await super().process_frame(frame, direction)
        await self.push_frame(frame, direction)


class Pushes(BaseObserver):
    def __init__(self, every: bool = True) -> None:
        super().__init__(observe_every_push=every)
        self.texts: list[str] = []

    async def on_push_frame(self, data: FramePushed) -> None:
        if isinstance(data.frame, TextFrame):
            self.texts.append(data.frame.text)


class Processed(BaseObserver):
    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    async def on_process_frame(self, data: FrameProcessed) -> None:
        if isinstance(data.frame, TextFrame):
            self.count += 1


class Broken(BaseObserver):
    async def on_push_frame(self, data: FramePushed) -> None:
        raise RuntimeError("observer bug")


async def _run(observers: list[BaseObserver]) -> None:
    pipeline_frames = [TextFrame("a"), TextFrame("b")]
    from pipecat.pipeline.pipeline import Pipeline

    await run_test(Pipeline([Relay(), Relay(), Relay()]), frames_to_send=pipeline_frames, observers=observers)


def test_each_observer_hears_what_pipecat_would_tell_it():
    alone = [Pushes(), Pushes(every=False), Processed()]
    asyncio.run(_run(alone))
    behind = [Pushes(), Broken(), Pushes(every=False), Processed()]
    fan = FanOutObserver(behind)
    asyncio.run(_run([fan]))
    assert behind[0].texts == alone[0].texts and len(alone[0].texts) > 2  # every hop
    assert behind[2].texts == alone[1].texts == ["a", "b"]  # first hop only
    assert behind[3].count == alone[2].count > 2  # the broken one did not stop the others
    assert fan.observe_every_push
    assert [o for o in fan._processed] == [behind[3]] and behind[3] not in fan._push
