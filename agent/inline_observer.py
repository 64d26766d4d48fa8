"""A call's own observers called where the frame event happens, not through a queue and a task.

pipecat's ``WorkerObserver`` hands every frame event to each observer through that observer's queue and task, so
that a slow observer cannot hold the pipeline up. Every push between two processors and every frame a processor
processes is one ``Queue.put`` and one task wake-up per observer: for a phone call, 50 audio frames a second
through about ten processors, each hop twice (the push and the processing). Cadence's observers of a call (behind
one ``FanOutObserver``) only read the frame and update counters, never wait, and log their own errors, so
``InlineWorkerObserver`` calls them in place; observers it is not told are inline (pipecat's turn tracking, one
added later with ``add_observer``) keep their proxy as before, and a processed-frame event is queued only for a
proxied observer that implements ``on_process_frame``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pipecat.observers.base_observer import BaseObserver, FrameProcessed, FramePushed, ProcessorSetUp
from pipecat.pipeline.worker_observer import Proxy, WorkerObserver

from agent.observer_fanout import overrides


class InlineWorkerObserver(WorkerObserver):
    """``WorkerObserver`` with ``inline`` observers awaited in place and ``observers`` behind proxies as pipecat does.

    An inline observer must not wait on anything and must handle its own errors (``FanOutObserver`` logs them).
    """

    def __init__(self, *, inline: Sequence[BaseObserver], observers: list[BaseObserver] | None = None):
        super().__init__(observers=observers)
        self.inline = list(inline)
        self._inline_push = [o for o in self.inline if overrides(o, "on_push_frame")]
        self._inline_processed = [o for o in self.inline if overrides(o, "on_process_frame")]
        self._inline_setup = [o for o in self.inline if overrides(o, "on_processor_setup")]
        self._inline_started = [o for o in self.inline if overrides(o, "on_pipeline_started")]
        # the proxies as a list, and those whose observer handles processed frames: read on every frame event,
        # so kept up to date where proxies come and go, not derived per event
        self._proxy_list: list[Proxy] = []
        self._processed_proxies: list[Proxy] = []

    def _proxies_changed(self) -> None:
        self._proxy_list = list((self._proxies or {}).values())
        self._processed_proxies = [p for p in self._proxy_list if overrides(p.observer, "on_process_frame")]

    async def setup(self, task_manager) -> None:
        await super().setup(task_manager)
        self._proxies_changed()
        for observer in self.inline:
            await observer.setup(task_manager)

    def add_observer(self, observer: BaseObserver) -> None:
        super().add_observer(observer)
        self._proxies_changed()

    async def remove_observer(self, observer: BaseObserver) -> None:
        await super().remove_observer(observer)
        self._proxies_changed()

    async def cleanup(self) -> None:
        await super().cleanup()
        for observer in self.inline:
            await observer.cleanup()

    async def on_pipeline_started(self) -> None:
        for observer in self._inline_started:
            await observer.on_pipeline_started()
        await super().on_pipeline_started()

    async def on_push_frame(self, data: FramePushed) -> None:
        frame = data.frame
        data.first_push = frame.id not in self._frames_pushed
        if data.first_push:
            self._frames_pushed[frame.id] = frame
        for observer in self._inline_push:
            if data.first_push or observer.observe_every_push:
                await observer.on_push_frame(data)
        for proxy in self._proxy_list:
            if data.first_push or proxy.observer.observe_every_push:
                await proxy.queue.put(data)

    async def on_process_frame(self, data: FrameProcessed) -> None:
        for observer in self._inline_processed:
            await observer.on_process_frame(data)
        for proxy in self._processed_proxies:
            await proxy.queue.put(data)

    async def on_processor_setup(self, data: ProcessorSetUp) -> None:
        for observer in self._inline_setup:
            await observer.on_processor_setup(data)
        await super().on_processor_setup(data)


def call_inline(worker: Any, observer: BaseObserver) -> InlineWorkerObserver:
    """Make ``worker`` (a ``PipelineWorker`` not yet run, given ``observer`` among its observers) call ``observer``
    in place; the observers pipecat added itself keep their proxies. The worker hands its observer to the
    processors when it sets them up, so this is done before it runs."""
    current = getattr(worker, "_observer", None)
    if not isinstance(current, WorkerObserver) or observer not in current._observers:
        raise RuntimeError(f"{type(worker).__name__} has no WorkerObserver holding {observer!r}: "
                           "the installed pipecat does not build its worker as pipecat-ai 1.14 does")
    replacement = InlineWorkerObserver(inline=[observer], observers=[o for o in current._observers if o is not observer])
    worker._observer = replacement
    return replacement
