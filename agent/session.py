"""Run one caller's pipeline on a transport until the caller leaves."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from loguru import logger
from pipecat.observers.base_observer import BaseObserver
from pipecat.transports.base_transport import BaseTransport
from pipecat.workers.runner import WorkerRunner

from agent.pipeline import Engines, build_worker


async def run_session(
    engines: Engines,
    transport: BaseTransport,
    session_id: str,
    *,
    observers: Sequence[BaseObserver] = (),
    pre_stages: Sequence[Any] = (),
    audio_out_sample_rate: int | None = None,
) -> None:
    """Build a pipeline for this caller and run it; cancel it when the client disconnects."""
    worker = build_worker(engines, transport, observers=observers, pre_stages=pre_stages,
                          audio_out_sample_rate=audio_out_sample_rate)

    @transport.event_handler("on_client_disconnected")
    async def _on_disconnected(_transport: Any, _client: Any = None) -> None:
        logger.info(f"session {session_id}: client disconnected")
        await worker.cancel(reason="client disconnected")

    runner = WorkerRunner(handle_sigint=False, check_dangling_tasks=False)
    await runner.add_workers(worker)
    logger.info(f"session {session_id}: started")
    try:
        await runner.run()
    finally:
        logger.info(f"session {session_id}: ended")
