"""Many observers of a call behind one of pipecat's observer proxies.

pipecat's ``WorkerObserver`` gives every observer its own queue and task, and puts every frame event on every
queue: each push between two processors, and each frame a processor processed, whether the observer handles that
kind of event or not (``BaseObserver.on_process_frame`` is a no-op most observers keep). A call carries five of
Cadence's observers (session watch, turn record, metrics, phone call record, transcript), so every 20 ms audio
frame became dozens of queue puts and task wake-ups: in a profile of 32 phone calls in one process, the
observer proxies were the largest single share of the event loop's work. ``FanOutObserver`` takes one proxy for
all of them and calls, in order, only the observers that override the event's handler (a push reaches an
observer created with ``observe_every_push=False`` on its first hop only, as pipecat does). An observer that
raises is logged and the others still run.
"""

from __future__ import annotations

from collections.abc import Sequence

from loguru import logger
from pipecat.observers.base_observer import BaseObserver, FrameProcessed, FramePushed, ProcessorSetUp
from pipecat.utils.asyncio.task_manager import BaseTaskManager


def overrides(observer: BaseObserver, name: str) -> bool:
    """Whether ``observer``'s class implements ``name`` (``BaseObserver``'s handlers do nothing)."""
    return getattr(type(observer), name) is not getattr(BaseObserver, name)


class FanOutObserver(BaseObserver):
    """``observers`` behind one proxy; each handler called only on the observers that implement it."""

    def __init__(self, observers: Sequence[BaseObserver]):
        self.observers = list(observers)
        super().__init__(observe_every_push=any(o.observe_every_push for o in self.observers))
        self._push = [o for o in self.observers if overrides(o, "on_push_frame")]
        self._processed = [o for o in self.observers if overrides(o, "on_process_frame")]
        self._setup_done = [o for o in self.observers if overrides(o, "on_processor_setup")]
        self._started = [o for o in self.observers if overrides(o, "on_pipeline_started")]

    async def setup(self, task_manager: BaseTaskManager):
        await super().setup(task_manager)
        for observer in self.observers:
            await observer.setup(task_manager)

    async def cleanup(self):
        await super().cleanup()
        for observer in self.observers:
            try:
                await observer.cleanup()
            except Exception as exc:
                logger.error(f"{self}: cleaning up {observer} failed: {exc!r}")

    async def on_push_frame(self, data: FramePushed):
        first = data.first_push
        for observer in self._push:
            if first or observer.observe_every_push:
                try:
                    await observer.on_push_frame(data)
                except Exception as exc:
                    logger.exception(f"{self}: {observer} failed on a push: {exc!r}")

    async def on_process_frame(self, data: FrameProcessed):
        for observer in self._processed:
            try:
                await observer.on_process_frame(data)
            except Exception as exc:
                logger.exception(f"{self}: {observer} failed on a processed frame: {exc!r}")

    async def on_processor_setup(self, data: ProcessorSetUp):
        for observer in self._setup_done:
            try:
                await observer.on_processor_setup(data)
            except Exception as exc:
                logger.exception(f"{self}: {observer} failed on a processor setup: {exc!r}")

    async def on_pipeline_started(self):
        for observer in self._started:
            try:
                await observer.on_pipeline_started()
            except Exception as exc:
                logger.exception(f"{self}: {observer} failed on pipeline start: {exc!r}")
