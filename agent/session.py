"""Run one caller's pipeline on a transport until the caller leaves, or a limit ends it.

A watchdog ends a session nobody is in anymore: no caller audio reached the pipeline for
``idle_timeout_s`` (the peer vanished without a close, or its transport's receive task died),
or the call outlived ``max_duration_s``. It cancels the worker like a hang-up would and, if the
worker does not stop within ``END_GRACE_S``, cancels its task outright: the caller's slot
always comes back.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from loguru import logger
from pipecat.frames.frames import InputAudioRawFrame
from pipecat.observers.base_observer import BaseObserver, FramePushed
from pipecat.transports.base_transport import BaseTransport
from pipecat.workers.runner import WorkerRunner

from agent.call_teardown import break_call_cycles
from agent.goodbye import say_goodbye
from agent.pipeline import Engines, build_worker

END_GRACE_S = 5.0
# A session counts as running (for the overload judgement) while its caller's audio arrived this recently.
RUNNING_WINDOW_S = 5.0


@dataclass(frozen=True)
class SessionLimits:
    idle_timeout_s: float = 30.0  # 0: no idle limit
    max_duration_s: float = 3600.0  # 0: no limit
    check_every_s: float = 0.5
    max_duration_goodbye: str = ""  # said before a call that reached max_duration_s is ended


class SessionWatch(BaseObserver):
    """Notes when caller audio last entered the pipeline; holds the session's worker (for a goodbye)."""

    def __init__(self) -> None:
        super().__init__(observe_every_push=False)  # a frame's first hop is its entry: not once per processor
        self.started = time.monotonic()
        self.last_input = self.started
        self.ended_by: str | None = None
        self.worker: Any = None  # the caller's PipelineWorker once built

    async def on_push_frame(self, data: FramePushed) -> None:
        if isinstance(data.frame, InputAudioRawFrame):
            self.last_input = time.monotonic()

    def running(self, now: float | None = None) -> bool:
        """Caller audio is flowing: a session really in use."""
        return ((now or time.monotonic()) - self.last_input) < RUNNING_WINDOW_S

    def expired(self, limits: SessionLimits, now: float) -> str | None:
        if limits.max_duration_s > 0 and now - self.started > limits.max_duration_s:
            return f"the call reached its maximum duration of {limits.max_duration_s:g} s"
        if limits.idle_timeout_s > 0 and now - self.last_input > limits.idle_timeout_s:
            return f"no caller audio for {limits.idle_timeout_s:g} s"
        return None


async def _watchdog(worker: Any, run: asyncio.Future, watch: SessionWatch, limits: SessionLimits,
                    session_id: str) -> None:
    while (reason := watch.expired(limits, time.monotonic())) is None:
        await asyncio.sleep(limits.check_every_s)
    watch.ended_by = reason
    logger.warning(f"session {session_id}: ending it: {reason}")
    if limits.max_duration_goodbye and reason.startswith("the call reached"):
        await say_goodbye(worker, limits.max_duration_goodbye, END_GRACE_S, f"session {session_id}")
    try:
        await asyncio.wait_for(worker.cancel(reason=reason), END_GRACE_S)
    except Exception as exc:  # TimeoutError, or a worker already torn down
        logger.debug(f"session {session_id}: cancel: {exc!r}")
    done, _ = await asyncio.wait({run}, timeout=END_GRACE_S)
    if not done:
        logger.warning(f"session {session_id}: the pipeline did not stop; cancelling its task")
        run.cancel()


async def run_session(
    engines: Engines,
    transport: BaseTransport,
    session_id: str,
    *,
    observers: Sequence[BaseObserver] = (),
    pre_stages: Sequence[Any] = (),
    audio_out_sample_rate: int | None = None,
    limits: SessionLimits | None = None,
    watch: SessionWatch | None = None,
) -> None:
    """Build a pipeline for this caller and run it; cancel it when the client disconnects or a limit hits."""
    watch = watch or SessionWatch()
    worker = build_worker(engines, transport, observers=[watch, *observers], pre_stages=pre_stages,
                          audio_out_sample_rate=audio_out_sample_rate, session_id=session_id,
                          ended_by=lambda: watch.ended_by)
    watch.worker = worker

    @transport.event_handler("on_client_disconnected")
    async def _on_disconnected(_transport: Any, _client: Any = None) -> None:
        logger.info(f"session {session_id}: client disconnected")
        await worker.cancel(reason="client disconnected")

    runner = WorkerRunner(handle_sigint=False, check_dangling_tasks=False)
    await runner.add_workers(worker)
    logger.info(f"session {session_id}: started")
    run = asyncio.ensure_future(runner.run())
    dog = None
    if limits is not None:
        dog = asyncio.create_task(_watchdog(worker, run, watch, limits, session_id), name=f"watchdog-{session_id}")
    try:
        await run
    except asyncio.CancelledError:
        if watch.ended_by is None or not run.cancelled():
            raise  # cancelled from outside, not by the watchdog
    finally:
        if dog is not None:
            dog.cancel()
        transport.remove_event_handler("on_client_disconnected", _on_disconnected)
        if run.done() and not run.cancelled():  # free the call now, not at the next full GC pass
            # (agent/call_teardown.py); a pipeline whose task had to be cancelled may still have tasks running
            break_call_cycles(worker, owned=(runner,), borrowed=tuple(pre_stages))
        logger.info(f"session {session_id}: ended")
