"""The LLM stage: any OpenAI-compatible streaming server (llama.cpp, vLLM, ...).

Differences from stock ``OpenAILLMService``: no silent client retries (a retry doubles the
caller's wait), a bounded request timeout, and when the server cannot be reached the caller
hears a short spoken apology instead of silence, while the session stays up. The context is
kept inside the model's window (``agent.context_window``) before every request; a turn that
ends in a tool call is not an empty answer (no retry); a forced tool choice applies to the
caller's turn, not to the answer after the tool's result (forcing it again would loop). HTML character
references some models write (``that&#39;s``) are decoded before the TTS and the context see them
(``agent.text_unescape``). With ``hold_after_tts`` a speculative reply is not held here but marked and sent on
to the TTS, and ``agent.speculative_audio_gate`` holds its audio (``agent.held_reply``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

import httpx
from loguru import logger
from openai import APIConnectionError, APIStatusError, APITimeoutError, AsyncOpenAI
from pipecat.adapters.llm.schemas.tools_schema import ToolsSchema
from pipecat.frames.frames import (
    Frame,
    FunctionCallFromLLM,
    InterruptionFrame,
    LLMContextFrame,
    LLMFullResponseEndFrame,
    LLMFullResponseStartFrame,
    LLMTextFrame,
    TTSSpeakFrame,
)
from pipecat.processors.aggregators.llm_context import LLMContext
from pipecat.processors.frame_processor import FrameDirection
from pipecat.services.openai.llm import OpenAILLMService

from agent.config import LLMConfig
from agent.context_window import ContextWindow
from agent.held_reply import UnheldSpeculationGate, mark_held_reply
from agent.openai_http import llm_timeout, openai_httpx
from agent.text_unescape import StreamUnescaper
from agent.withdrawn_speculation import is_withdrawn, speculation_of


class RequestTotals:
    """Chat completions this process has sent (``cadence_llm_requests_total``): with the turns, how many requests
    a turn costs the LLM server (speculative ones withdrawn, empty replies retried)."""

    sent = 0
    # speculative replies dropped at this stage (agent.withdrawn_speculation): withdrawn_unstarted (the request never
    # went out), withdrawn_late (withdrawn while it streamed; the rest of its reply dropped)
    dropped: ClassVar[dict[str, int]] = {"withdrawn_unstarted": 0, "withdrawn_late": 0}


TOTALS = RequestTotals()

UNREACHABLE = (APIConnectionError, APITimeoutError, httpx.TransportError, openai_httpx().TransportError, TimeoutError)


class CadenceLLMService(OpenAILLMService):
    """OpenAI-protocol LLM service with fast failure and a spoken apology."""

    def __init__(self, config: LLMConfig, base_url: str, model: str,
                 http_client: Any = None, *, hold_after_tts: bool = False, **kwargs):
        """``hold_after_tts``: a ``SpeculativeAudioGate`` after the TTS holds speculative replies, so this stage
        lets them through (marked); only for a pipeline that has one."""
        self._request_timeout_s = config.request_timeout_s
        self._apology = config.apology
        self._empty_reply = config.empty_reply
        self._http_client = http_client
        self._produced_text = False
        self._called_tools = False
        self.window = ContextWindow(window_tokens=config.context_size, reply_tokens=config.max_tokens)
        self.unreachable_count = 0
        self.empty_count = 0
        self.withdrawn_unstarted = 0  # speculative requests dropped because their withdrawal came first
        self.withdrawn_late = 0  # replies dropped because their speculation was withdrawn while they streamed
        self._answering: object | None = None  # the speculation the request in flight answers (None: the turn's)
        self._dropping = False  # the reply in flight was dropped from its start
        self._counted_late = False
        self._unescape = StreamUnescaper()
        super().__init__(
            api_key=config.api_key,
            base_url=base_url,
            settings=OpenAILLMService.Settings(
                model=model or "default",
                system_instruction=config.system_prompt,
                temperature=config.temperature,
                max_tokens=config.max_tokens,
            ),
            **kwargs,
        )
        self._hold_after_tts = hold_after_tts
        if hold_after_tts:
            self._speculation_gate = UnheldSpeculationGate(name=f"{self}::UnheldSpeculationGate")

    def create_client(self, api_key=None, base_url=None, organization=None, project=None,
                      default_headers=None, **kwargs) -> AsyncOpenAI:
        return AsyncOpenAI(
            api_key=api_key,
            base_url=base_url,
            organization=organization,
            project=project,
            default_headers=default_headers,
            max_retries=0,
            timeout=llm_timeout(self._request_timeout_s, connect_s=2.0),
            http_client=self._http_client,
        )

    async def process_frame(self, frame: Frame, direction: FrameDirection):
        if isinstance(frame, LLMContextFrame):
            speculation = speculation_of(frame)
            if is_withdrawn(speculation):
                self.withdrawn_unstarted += 1  # its cancel overtook it: answering now would answer the turn twice
                TOTALS.dropped["withdrawn_unstarted"] += 1
                logger.debug(f"{self}: a speculative request withdrawn before it started: dropped")
                return
            self._answering, self._dropping, self._counted_late = speculation, False, False
        await super().process_frame(frame, direction)

    async def push_frame(self, frame: Frame, direction: FrameDirection = FrameDirection.DOWNSTREAM):
        if self._withdrawn_reply(frame, direction):
            return
        if isinstance(frame, LLMTextFrame) and direction == FrameDirection.DOWNSTREAM:
            frame.text = self._unescape.feed(frame.text)
            if not frame.text:
                return  # the start of a possible character reference: it goes out with the next piece
            if frame.text.strip():
                self._produced_text = True
        elif isinstance(frame, LLMFullResponseEndFrame):
            held = self._unescape.flush()
            if held:
                self._produced_text = self._produced_text or bool(held.strip())
                await super().push_frame(LLMTextFrame(held), FrameDirection.DOWNSTREAM)
        elif isinstance(frame, InterruptionFrame):
            self._unescape.flush()  # the reply was cut off: what it held is not said
        elif (isinstance(frame, LLMFullResponseStartFrame) and self._hold_after_tts
              and self._speculation_gate.is_speculating):  # its turn is not confirmed yet
            mark_held_reply(frame)
        await super().push_frame(frame, direction)

    def _withdrawn_reply(self, frame: Frame, direction: FrameDirection) -> bool:
        """A reply frame of a speculation withdrawn while its request streams: dropped (pipecat's service stops
        the request only if it was speculating when the cancel came; a reply the cancel missed would reach the
        caller after the turn's own)."""
        if direction != FrameDirection.DOWNSTREAM or not is_withdrawn(self._answering):
            return False
        if isinstance(frame, LLMFullResponseStartFrame):
            self._dropping = True  # its end goes too: nothing downstream saw it start
        elif isinstance(frame, LLMFullResponseEndFrame):
            if not self._dropping:
                return False  # it started before the withdrawal: the TTS closes it (the cancel dropped its audio)
            self._answering, self._dropping = None, False
            return True
        elif not isinstance(frame, LLMTextFrame):
            return False
        if not self._counted_late:
            self._counted_late = True
            self.withdrawn_late += 1
            TOTALS.dropped["withdrawn_late"] += 1
            logger.debug(f"{self}: a reply whose speculation was withdrawn while it streamed: dropped")
        return True

    async def get_chat_completions(self, context: LLMContext) -> Any:
        TOTALS.sent += 1
        return await super().get_chat_completions(context)

    def build_chat_completion_params(self, params_from_context: Any) -> dict:
        params = super().build_chat_completion_params(params_from_context)
        choice = params.get("tool_choice")
        messages = params.get("messages") or []
        forced = isinstance(choice, dict) or choice == "required"
        if forced and messages and messages[-1].get("role") == "tool":
            params["tool_choice"] = "none"
        return params

    async def run_function_calls(self, function_calls: Sequence[FunctionCallFromLLM]):
        if function_calls:
            self._called_tools = True
        await super().run_function_calls(function_calls)

    def fit_window(self, context: LLMContext) -> None:
        """Trim the oldest turns when the context would overflow the model's window."""
        tools = context.tools if isinstance(context.tools, ToolsSchema) else None
        schemas = [t.to_default_dict() for t in tools.standard_tools] if tools else None
        messages = list(context.get_messages())
        if not all(isinstance(m, dict) for m in messages):
            return  # provider-specific messages: not ours to cut
        system = self._settings.system_instruction
        head = [{"role": "system", "content": system}] if isinstance(system, str) and system else []
        trimmed = self.window.fit(head + messages, schemas)
        if trimmed is not None:
            logger.info(f"{self}: context trimmed to fit {self.window.window_tokens} tokens: "
                        f"{len(messages)} -> {len(trimmed) - len(head)} messages")
            context.set_messages(trimmed[len(head):])

    async def _process_context(self, context: LLMContext):
        self.fit_window(context)
        try:
            for attempt in range(2):  # a completion with no text is retried once
                self._produced_text = False
                self._called_tools = False
                await super()._process_context(context)
                if self._produced_text or self._called_tools or is_withdrawn(self._answering):
                    return  # a withdrawn reply's text was dropped here, not missing: no retry, nothing said
                logger.warning(f"{self}: the LLM returned no text (attempt {attempt + 1})")
            self.empty_count += 1
            await self.push_frame(TTSSpeakFrame(self._empty_reply))
        except UNREACHABLE as exc:
            if not is_withdrawn(self._answering):  # nobody waits for a withdrawn reply
                await self._apologize(f"LLM server unreachable at {self._client.base_url}: {exc}")
        except APIStatusError as exc:
            if exc.status_code < 500:
                raise
            if not is_withdrawn(self._answering):
                await self._apologize(f"LLM server error {exc.status_code} at {self._client.base_url}")

    async def _apologize(self, message: str) -> None:
        self.unreachable_count += 1
        logger.error(f"{message}; the caller hears an apology and the session stays up")
        await self.push_frame(TTSSpeakFrame(self._apology))
