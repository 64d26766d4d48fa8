"""Tool calls in the spoken flow, through the real LLM stage and the real llama.cpp server.

The bot's context, tool registration and tool-call handling are the production ones
(``agent.pipeline.make_context``); the pipeline is the LLM part of a call (user aggregator ->
LLM -> assistant aggregator) with the frames meant for the TTS recorded. The tool choice is
forced (the 135M model cannot be trusted to choose); what is checked is what happens around the
call: the filler while a slow tool runs, the apology when a tool fails (and the call going on),
and a barge-in cancelling a pending call so its result is never spoken.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
from pipecat.frames.frames import (
    InterruptionFrame,
    LLMFullResponseEndFrame,
    LLMMessagesAppendFrame,
    TTSSpeakFrame,
)
from pipecat.observers.base_observer import BaseObserver, FramePushed
from pipecat.pipeline.pipeline import Pipeline
from pipecat.pipeline.worker import PipelineParams, PipelineWorker
from pipecat.processors.aggregators.llm_response_universal import LLMContextAggregatorPair
from pipecat.workers.runner import WorkerRunner

from agent.bot import Bot, Say
from agent.call_control import CallControl
from agent.config import load_config
from agent.llm_server import ManagedLLMServer, embedded_llama_server
from agent.llm_stage import CadenceLLMService
from agent.pipeline import make_context

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def server() -> Iterator[ManagedLLMServer]:
    with embedded_llama_server(threads=2) as s:
        yield s


class Spoken(BaseObserver):
    def __init__(self) -> None:
        super().__init__(observe_every_push=False)
        self.texts: list[str] = []
        self.ends = 0

    async def on_push_frame(self, data: FramePushed) -> None:
        if isinstance(data.frame, TTSSpeakFrame):
            self.texts.append(data.frame.text)
        elif isinstance(data.frame, LLMFullResponseEndFrame):
            self.ends += 1


async def _call(server: ManagedLLMServer, bot: Bot, script) -> tuple[Spoken, CallControl]:
    config = bot.configure(load_config(None, ["llm.max_tokens=24", "llm.request_timeout_s=90",
                                              "call.filler_after_s=0.3"]))
    llm = CadenceLLMService(config.llm, server.base_url, server.model_id)
    control = CallControl("flow", config.call)
    control.llm = llm
    pair = LLMContextAggregatorPair(make_context(bot, llm, control, config.call))
    spoken = Spoken()
    worker = PipelineWorker(Pipeline([pair.user(), llm, pair.assistant()]), params=PipelineParams(),
                            observers=[spoken], enable_rtvi=False, idle_timeout_secs=None)
    runner = WorkerRunner(handle_sigint=False, check_dangling_tasks=False)
    await runner.add_workers(worker)
    run = asyncio.ensure_future(runner.run())
    try:
        await asyncio.sleep(0.2)

        async def say(text: str) -> None:
            await worker.queue_frames([LLMMessagesAppendFrame(messages=[{"role": "user", "content": text}],
                                                              run_llm=True)])

        await asyncio.wait_for(script(say, worker, control), 180)
    finally:
        await worker.cancel()
        await asyncio.wait_for(run, 10)
    return spoken, control


async def _until(predicate, timeout_s: float = 120) -> None:
    for _ in range(int(timeout_s / 0.05)):
        if predicate():
            return
        await asyncio.sleep(0.05)
    raise TimeoutError


def test_slow_tool_gets_a_filler_and_a_failing_one_an_apology(server):
    attempts = []
    bot = Bot("You are a pizza shop.", tool_choice="order_status")

    @bot.tool(filler="Let me check.")
    async def order_status(order: int) -> Say:
        """The status of an order."""
        attempts.append(order)
        if len(attempts) == 1:
            raise ConnectionError("the order system is down")
        await asyncio.sleep(1.0)
        return Say("Your pizza is in the oven.")

    async def script(say, _worker, control) -> None:
        log = control.tool_log.calls
        await say("Where is my order 42?")
        await _until(lambda: len(log) == 1 and log[0]["error"])
        await say("Please check order 42 again.")
        await _until(lambda: len(log) == 2 and log[1]["result"])
        await asyncio.sleep(0.3)

    spoken, control = asyncio.run(_call(server, bot, script))
    log = control.tool_log.calls
    assert log[0]["error"] == "ConnectionError: the order system is down"
    assert isinstance(log[1]["arguments"].get("order"), int)
    # the apology after the failure, then (the call went on) the filler and the spoken result
    assert spoken.texts == [load_config(None, []).call.tool_error_reply, "Let me check.", "Your pizza is in the oven."]


def test_barge_in_cancels_the_pending_tool_call(server):
    bot = Bot("You are a pizza shop.", tool_choice="order_status")
    started = asyncio.Event()

    @bot.tool(filler="")
    async def order_status(order: int) -> Say:
        """The status of an order."""
        started.set()
        await asyncio.sleep(5.0)
        return Say("Your pizza is in the oven.")

    async def script(say, worker, control) -> None:
        await say("Where is my order 42?")
        await _until(started.is_set)
        await worker.queue_frames([InterruptionFrame()])  # the caller talks over the wait
        await _until(lambda: control.tool_log.calls and control.tool_log.calls[0]["cancelled"], 10)
        await asyncio.sleep(5.5)  # past the moment the tool would have answered

    spoken, control = asyncio.run(_call(server, bot, script))
    assert control.tool_log.calls[0]["cancelled"] and control.tool_log.calls[0]["result"] is None
    assert "Your pizza is in the oven." not in spoken.texts
