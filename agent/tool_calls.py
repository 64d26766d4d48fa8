"""Tool calls in the spoken flow, on pipecat's function-calling machinery (``llm.register_function``).

While a tool runs longer than ``filler_after_s`` the caller hears a short filler ("One moment.");
a tool that raises (or gets unusable arguments) becomes a spoken apology and the call goes on;
a caller who barges in cancels the pending call (pipecat's ``cancel_on_interruption``), so its
result is never spoken. ``Say`` results are spoken as they are, with no second LLM pass.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field

from loguru import logger
from pipecat.frames.frames import FunctionCallResultProperties, TTSSpeakFrame
from pipecat.services.llm_service import FunctionCallParams, LLMService

from agent.tools import Call, Say, Tool


@dataclass
class ToolCallStyle:
    """How tool calls sound."""

    filler: str = "One moment, please."
    filler_after_s: float = 0.8
    error_reply: str = "Sorry, something went wrong on my side with that. Could we try another way?"
    timeout_s: float = 20.0


@dataclass
class ToolLog:
    """What each tool call of one call did (for transcripts and tests)."""

    calls: list[dict] = field(default_factory=list)


def register_tools(llm: LLMService, tools: Sequence[Tool], style: ToolCallStyle, call: Call | None,
                   log: ToolLog | None = None) -> None:
    """Register each tool's handler on ``llm`` for one call."""
    for tool in tools:
        llm.register_function(tool.name, _handler(tool, style, call, log), cancel_on_interruption=True,
                              timeout_secs=style.timeout_s)


def _handler(tool: Tool, style: ToolCallStyle, call: Call | None, log: ToolLog | None):
    async def handle(params: FunctionCallParams) -> None:
        arguments = dict(params.arguments)
        entry = {"tool": tool.name, "arguments": arguments, "result": None, "error": None, "cancelled": False}
        if log is not None:
            log.calls.append(entry)
        task = asyncio.ensure_future(tool.invoke(arguments, call))
        try:
            done, _ = await asyncio.wait({task}, timeout=style.filler_after_s)
            filler = tool.filler if tool.filler is not None else style.filler
            if not done and filler:
                await params.llm.push_frame(TTSSpeakFrame(filler, append_to_context=False))
            result = await task
        except asyncio.CancelledError:
            task.cancel()
            entry["cancelled"] = True
            logger.info(f"tool {tool.name}: cancelled (the caller spoke, or it timed out)")
            raise
        except Exception as exc:
            entry["error"] = f"{type(exc).__name__}: {exc}"
            logger.warning(f"tool {tool.name}({arguments}) failed: {entry['error']}; the caller hears an apology")
            await params.llm.push_frame(TTSSpeakFrame(style.error_reply))
            await params.result_callback({"error": entry["error"]},
                                         properties=FunctionCallResultProperties(run_llm=False))
            return
        if isinstance(result, Say):
            entry["result"] = result.text
            if result.text:
                await params.llm.push_frame(TTSSpeakFrame(result.text))
            await params.result_callback(result.text, properties=FunctionCallResultProperties(run_llm=False))
            return
        entry["result"] = result
        await params.result_callback(result)

    return handle
