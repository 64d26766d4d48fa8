"""The LLM stage: any OpenAI-compatible streaming server (llama.cpp, vLLM, ...).

Differences from stock ``OpenAILLMService``: no silent client retries (a retry doubles the
caller's wait), a bounded request timeout, and when the server cannot be reached the caller
hears a short spoken apology instead of silence, while the session stays up.
"""

from __future__ import annotations

import httpx
from loguru import logger
from openai import APIConnectionError, APIStatusError, APITimeoutError, AsyncOpenAI
from pipecat.frames.frames import Frame, LLMTextFrame, TTSSpeakFrame
from pipecat.processors.aggregators.llm_context import LLMContext
from pipecat.processors.frame_processor import FrameDirection
from pipecat.services.openai.llm import OpenAILLMService

from agent.config import LLMConfig

UNREACHABLE = (APIConnectionError, APITimeoutError, httpx.TransportError, TimeoutError)


class CadenceLLMService(OpenAILLMService):
    """OpenAI-protocol LLM service with fast failure and a spoken apology."""

    def __init__(self, config: LLMConfig, base_url: str, model: str,
                 http_client: httpx.AsyncClient | None = None, **kwargs):
        self._request_timeout_s = config.request_timeout_s
        self._apology = config.apology
        self._empty_reply = config.empty_reply
        self._http_client = http_client
        self._produced_text = False
        self.unreachable_count = 0
        self.empty_count = 0
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

    def create_client(self, api_key=None, base_url=None, organization=None, project=None,
                      default_headers=None, **kwargs) -> AsyncOpenAI:
        return AsyncOpenAI(
            api_key=api_key,
            base_url=base_url,
            organization=organization,
            project=project,
            default_headers=default_headers,
            max_retries=0,
            timeout=httpx.Timeout(self._request_timeout_s, connect=2.0),
            http_client=self._http_client,
        )

    async def push_frame(self, frame: Frame, direction: FrameDirection = FrameDirection.DOWNSTREAM):
        if isinstance(frame, LLMTextFrame) and frame.text.strip():
            self._produced_text = True
        await super().push_frame(frame, direction)

    async def _process_context(self, context: LLMContext):
        try:
            for attempt in range(2):  # a completion with no text is retried once
                self._produced_text = False
                await super()._process_context(context)
                if self._produced_text:
                    return
                logger.warning(f"{self}: the LLM returned no text (attempt {attempt + 1})")
            self.empty_count += 1
            await self.push_frame(TTSSpeakFrame(self._empty_reply))
        except UNREACHABLE as exc:
            await self._apologize(f"LLM server unreachable at {self._client.base_url}: {exc}")
        except APIStatusError as exc:
            if exc.status_code < 500:
                raise
            await self._apologize(f"LLM server error {exc.status_code} at {self._client.base_url}")

    async def _apologize(self, message: str) -> None:
        self.unreachable_count += 1
        logger.error(f"{message}; the caller hears an apology and the session stays up")
        await self.push_frame(TTSSpeakFrame(self._apology))
