"""A long synthetic call through the real LLM stage and context code, against a real server.

Turns go through pipecat's user aggregator -> ``CadenceLLMService`` -> assistant aggregator (the
same context objects a live call uses), as fast as the server answers: no audio, so 30 minutes
of call take a fraction of that. Each caller line is a recorded prompt's transcript (Asterisk
corpus, 15-40 words); the call's simulated clock advances by the time those words and the bot's
reply take to say (150 words a minute) plus 2 s per exchange (the bot's ~0.8 s to answer and the
caller's pause). Every
``tool_every`` turns a tool call and its result are added as pipecat's aggregator adds them, so
trimming must keep call/result pairs whole and the newest result of each tool. Every request
the service sends is read off the wire (an httpx hook): whether it opens with the system prompt.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import time
from dataclasses import dataclass, field

import httpx
from pipecat.frames.frames import (
    ErrorFrame,
    LLMContextAssistantTimestampFrame,
    LLMFullResponseEndFrame,
    LLMMessagesAppendFrame,
    TTSSpeakFrame,
)
from pipecat.observers.base_observer import BaseObserver, FramePushed
from pipecat.pipeline.pipeline import Pipeline
from pipecat.pipeline.worker import PipelineParams, PipelineWorker
from pipecat.processors.aggregators.llm_context import LLMContext
from pipecat.processors.aggregators.llm_response_universal import LLMContextAggregatorPair
from pipecat.workers.runner import WorkerRunner

from agent.config import LLMConfig
from agent.llm_stage import CadenceLLMService

WORDS_PER_S = 150 / 60
PAUSE_S = 2.0  # per exchange: the bot's answer latency and the caller's pause


@dataclass
class LongCallReport:
    turns: int = 0
    simulated_s: float = 0.0
    wall_s: float = 0.0
    trims: int = 0
    errors: list[str] = field(default_factory=list)
    apologies: int = 0  # unreachable server / 5xx
    empty_replies: int = 0
    max_estimate_tokens: int = 0  # the largest context sent, by the window's estimate
    untrimmed_estimate_tokens: int = 0  # what the call's whole history would have been
    turn_s: list[float] = field(default_factory=list)
    requests: int = 0  # chat completions sent to the server
    requests_without_system_prompt: int = 0
    newest_tool_calls: dict[str, str] = field(default_factory=dict)  # tool name -> its newest call's id
    final_messages: list[dict] = field(default_factory=list)


class _Watch(BaseObserver):
    def __init__(self) -> None:
        super().__init__(observe_every_push=False)
        self.done = asyncio.Event()
        self.reply_added = asyncio.Event()  # the assistant aggregator put the reply in the context
        self.errors: list[str] = []
        self.spoken: list[str] = []

    async def on_push_frame(self, data: FramePushed) -> None:
        if isinstance(data.frame, LLMFullResponseEndFrame):
            self.done.set()
        elif isinstance(data.frame, LLMContextAssistantTimestampFrame):
            self.reply_added.set()
        elif isinstance(data.frame, ErrorFrame):
            self.errors.append(str(data.frame.error))
            self.done.set()
            self.reply_added.set()
        elif isinstance(data.frame, TTSSpeakFrame):
            self.spoken.append(data.frame.text)


def caller_lines(seed: int = 0) -> list[str]:
    from testkit.corpus import prompts

    lines = [p.text for p in prompts(min_words=15, max_words=40)]
    random.Random(seed).shuffle(lines)
    return lines


async def run_long_call(base_url: str, model: str, *, minutes: float = 30.0, max_tokens: int = 8,
                        context_size: int = 2048, tool_every: int = 10, api_key: str = "cadence-local",
                        seed: int = 0, turn_timeout_s: float = 120.0) -> LongCallReport:
    """Drive a ``minutes``-long call; returns what happened (errors, trims, sizes, timings)."""
    config = LLMConfig(base_url=base_url, api_key=api_key, max_tokens=max_tokens, context_size=context_size,
                       request_timeout_s=turn_timeout_s)
    report = LongCallReport()

    async def read_request(request: httpx.Request) -> None:
        if request.url.path.endswith("/chat/completions"):
            sent = json.loads(request.content).get("messages") or [{}]
            report.requests += 1
            if sent[0] != {"role": "system", "content": config.system_prompt}:
                report.requests_without_system_prompt += 1

    http = httpx.AsyncClient(event_hooks={"request": [read_request]})
    llm = CadenceLLMService(config, base_url, model, http_client=http)
    context = LLMContext()
    pair = LLMContextAggregatorPair(context)
    watch = _Watch()
    worker = PipelineWorker(Pipeline([pair.user(), llm, pair.assistant()]), params=PipelineParams(),
                            observers=[watch], enable_rtvi=False, idle_timeout_secs=None)
    runner = WorkerRunner(handle_sigint=False, check_dangling_tasks=False)
    await runner.add_workers(worker)
    run = asyncio.ensure_future(runner.run())
    lines = caller_lines(seed)
    history_chars = len(config.system_prompt)
    t0 = time.monotonic()
    try:
        await asyncio.sleep(0.2)
        while report.simulated_s < minutes * 60:
            line = lines[report.turns % len(lines)]
            messages: list[dict] = [{"role": "user", "content": line}]
            if tool_every and report.turns % tool_every == tool_every - 1:
                call_id = f"call_{report.turns}"
                name = "check_availability" if (report.turns // tool_every) % 2 else "book_appointment"
                report.newest_tool_calls[name] = call_id
                messages = [messages[0],
                            {"role": "assistant", "tool_calls": [{"id": call_id, "type": "function", "function": {
                                "name": name, "arguments": json.dumps({"day": "Tuesday"})}}]},
                            {"role": "tool", "tool_call_id": call_id,
                             "content": json.dumps(f"{name} result at turn {report.turns}")}]
            watch.done.clear()
            watch.reply_added.clear()
            started = time.monotonic()
            await worker.queue_frames([LLMMessagesAppendFrame(messages=messages, run_llm=True)])
            await asyncio.wait_for(watch.done.wait(), turn_timeout_s)
            # The assistant aggregator adds the reply just after the end frame (an empty reply adds none).
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(watch.reply_added.wait(), 2.0)
            report.turn_s.append(time.monotonic() - started)
            msgs = [m for m in context.get_messages() if isinstance(m, dict)]
            reply = str(msgs[-1].get("content") or "") if msgs and msgs[-1].get("role") == "assistant" else ""
            history_chars += sum(len(json.dumps(m)) for m in messages) + len(reply)
            report.untrimmed_estimate_tokens = int(history_chars / llm.window.chars_per_token)
            report.max_estimate_tokens = max(report.max_estimate_tokens, llm.window.last_estimate)
            words = len(line.split()) + len(reply.split())
            report.simulated_s += words / WORDS_PER_S + PAUSE_S
            report.turns += 1
            if watch.errors:
                break
    finally:
        report.wall_s = time.monotonic() - t0
        report.errors = list(watch.errors)
        report.trims = llm.window.trims
        report.apologies = llm.unreachable_count
        report.empty_replies = llm.empty_count
        report.final_messages = [m for m in context.get_messages() if isinstance(m, dict)]
        await worker.cancel()
        try:
            await asyncio.wait_for(run, 10)
        except (TimeoutError, asyncio.CancelledError):
            run.cancel()
        await http.aclose()
    return report
