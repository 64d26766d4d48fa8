"""Each call's transcript, with per-turn timing, kept after the call.

``CallTranscript`` is an observer: every caller turn, bot utterance and tool call becomes one JSON
line in ``<call.transcripts_dir>/<call id>.jsonl`` as it completes (a crash keeps what was said so
far); the last line is ``{"event": "call_end", ...}``. With ``call.webhook_url`` the whole
transcript is POSTed there as JSON when the call ends, from a background task, retried with
backoff: the call never waits for it.

Times are seconds since the call started (``t_start`` / ``t_end``); a bot line carries
``response_ms``, from the end of the caller's turn to the bot's first audio.
"""

from __future__ import annotations

import asyncio
import json
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
from loguru import logger
from pipecat.frames.frames import (
    BotStartedSpeakingFrame,
    BotStoppedSpeakingFrame,
    FunctionCallInProgressFrame,
    FunctionCallResultFrame,
    InterruptionFrame,
    TranscriptionFrame,
    TTSTextFrame,
    UserStartedSpeakingFrame,
    UserStoppedSpeakingFrame,
)
from pipecat.observers.base_observer import BaseObserver, FramePushed

from agent.held_reply_filter import HeldReplyFilter

_BACKGROUND: set[asyncio.Task] = set()  # webhook deliveries in flight (held so they are not collected)


class CallTranscript(BaseObserver):
    """Collects one call's transcript; writes it as JSON lines and/or posts it at the end."""

    def __init__(self, call_id: str, folder: str | Path = "", webhook_url: str = "", *,
                 webhook_attempts: int = 4, webhook_timeout_s: float = 5.0) -> None:
        super().__init__(observe_every_push=False)
        self.call_id = call_id
        self.started = time.monotonic()
        self.started_at = datetime.now(UTC).isoformat()
        self.lines: list[dict[str, Any]] = []
        self.path = Path(folder) / f"{call_id}.jsonl" if folder else None
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        self.webhook_url = webhook_url
        self.webhook_attempts = webhook_attempts
        self.webhook_timeout_s = webhook_timeout_s
        self._offset_ns: int | None = None
        self._caller: dict[str, Any] | None = None
        self._bot: dict[str, Any] | None = None
        self._bot_text: list[str] = []
        self._last_caller_end: float | None = None
        self._held_reply = HeldReplyFilter()
        self._tools: dict[str, dict[str, Any]] = {}
        self.finished = False
        self.delivery: asyncio.Task | None = None

    def _t(self, at: float | None = None) -> float:
        return round((at if at is not None else time.monotonic()) - self.started, 3)

    def _emit(self, line: dict[str, Any]) -> None:
        line = {"call_id": self.call_id, **line}
        self.lines.append(line)
        if self.path is not None:
            with self.path.open("a", encoding="utf-8") as f:
                f.write(json.dumps(line, ensure_ascii=False) + "\n")

    async def on_push_frame(self, data: FramePushed) -> None:
        for push in self._held_reply.feed(data):  # a withdrawn speculative reply was never said
            self._observe(push)

    def _observe(self, data: FramePushed) -> None:
        frame = data.frame
        if self._offset_ns is None:  # push timestamps count from the pipeline clock's start
            self._offset_ns = int(getattr(data.source.get_clock(), "_time", 0))
        at = (data.timestamp + self._offset_ns) / 1e9
        if isinstance(frame, UserStartedSpeakingFrame):
            self._caller = {"speaker": "caller", "text": "", "t_start": self._t(at)}
        elif isinstance(frame, TranscriptionFrame) and frame.text.strip():
            if self._caller is None:  # text after the turn closed: it belongs to the last caller line
                self._caller = {"speaker": "caller", "text": "", "t_start": self._t(at)}
            self._caller["text"] = f"{self._caller['text']} {frame.text.strip()}".strip()
            if "t_end" in self._caller:
                self._caller_done()
        elif isinstance(frame, UserStoppedSpeakingFrame) and self._caller is not None:
            self._caller["t_end"] = self._t(at)
            self._last_caller_end = at
            if self._caller["text"]:
                self._caller_done()
        elif isinstance(frame, BotStartedSpeakingFrame):
            self._bot = {"speaker": "bot", "text": "", "t_start": self._t(at)}
            if self._last_caller_end is not None:
                self._bot["response_ms"] = round((at - self._last_caller_end) * 1000.0, 1)
        elif isinstance(frame, TTSTextFrame):  # first pushed by the TTS, which may be before the audio plays
            self._bot_text.append(frame.text.strip())
        elif isinstance(frame, InterruptionFrame) and self._bot is not None:
            self._bot["interrupted"] = True
        elif isinstance(frame, BotStoppedSpeakingFrame) and self._bot is not None:
            self._bot["t_end"] = self._t(at)
            self._bot_done()
        elif isinstance(frame, FunctionCallInProgressFrame):
            self._tools[frame.tool_call_id] = {"speaker": "tool", "name": frame.function_name,
                                               "arguments": dict(frame.arguments), "t_start": self._t(at)}
        elif isinstance(frame, FunctionCallResultFrame) and frame.tool_call_id in self._tools:
            line = self._tools.pop(frame.tool_call_id)
            self._emit({**line, "result": frame.result, "t_end": self._t(at)})

    def _bot_done(self) -> None:
        assert self._bot is not None
        self._bot["text"] = " ".join(t for t in self._bot_text if t)
        self._bot_text.clear()
        if self._bot["text"] or self._bot.get("interrupted"):
            self._emit(self._bot)
            self._last_caller_end = None  # the caller's turn is answered (a bot line with no words is not)
        else:
            self._bot.pop("response_ms", None)
        self._bot = None

    def _caller_done(self) -> None:
        assert self._caller is not None
        self._caller.setdefault("t_end", self._t())
        self._emit(self._caller)
        self._caller = None

    def finish(self, ended_by: str = "hang-up") -> None:
        """The call ended: flush open lines, write ``call_end``, start the webhook delivery."""
        if self.finished:
            return
        self.finished = True
        if self._caller is not None and self._caller["text"]:
            self._caller_done()
        if self._bot is not None:
            self._bot.update(t_end=self._t(), interrupted=True)
            self._bot_done()
        for line in self._tools.values():
            self._emit({**line, "result": None, "cancelled": True})
        self._emit({"event": "call_end", "ended_by": ended_by, "duration_s": self._t(),
                    "started_at": self.started_at})
        if self.webhook_url:
            payload = {"call_id": self.call_id, "started_at": self.started_at, "ended_by": ended_by,
                       "duration_s": self._t(), "lines": self.lines}
            self.delivery = asyncio.get_running_loop().create_task(
                post_webhook(self.webhook_url, payload, self.webhook_attempts, self.webhook_timeout_s))
            _BACKGROUND.add(self.delivery)
            self.delivery.add_done_callback(_BACKGROUND.discard)


async def post_webhook(url: str, payload: dict[str, Any], attempts: int = 4, timeout_s: float = 5.0,
                       first_backoff_s: float = 0.5) -> bool:
    """POST ``payload`` as JSON; retry on errors and 5xx/429 with doubling backoff. True once a 2xx came back."""
    backoff = first_backoff_s
    async with httpx.AsyncClient(timeout=timeout_s) as client:
        for attempt in range(1, max(1, attempts) + 1):
            try:
                r = await client.post(url, json=payload)
                if r.is_success:
                    logger.info(f"transcript webhook: delivered to {url} (attempt {attempt})")
                    return True
                if r.status_code < 500 and r.status_code != 429:
                    logger.error(f"transcript webhook: {url} refused it with HTTP {r.status_code}; not retried")
                    return False
                reason = f"HTTP {r.status_code}"
            except httpx.HTTPError as exc:
                reason = f"{type(exc).__name__}: {exc}"
            logger.warning(f"transcript webhook: attempt {attempt} to {url} failed ({reason})")
            if attempt < attempts:
                await asyncio.sleep(backoff)
                backoff *= 2
    logger.error(f"transcript webhook: gave up on {url} after {attempts} attempts")
    return False
