"""What the caller actually heard: ``mark`` messages placed in the outbound audio.

The provider echoes a mark once the audio sent before it has played. We place one every
``every_ms`` of a reply and one at its end, so each reply knows how much of it reached the
caller's ear. On ``clear`` the provider echoes the marks still pending at once: those count as
dropped, not heard; the heard position is then estimated from the playout clock.

A reply here is one spurt of bot audio (it ends at pipecat's ``BotStoppedSpeakingFrame``). A mark's name
carries the *response* (``r<response>-<ms>``): the TTS context the audio came from, so a response whose audio
stalled long enough for the bot to stop speaking and then went on keeps its name, and its marks' milliseconds
count on from the first spurt's (run 64's CPU-box check: two such stalls read as turns answered twice).
A reply that answers a turn also carries what ended that turn (``r<response>-<by>-<ms>``, ``by`` one of
``model``, ``silence`` for the turn model's silence fallback, ``finished_text``, ``no_words``, or ``vad`` where
the VAD's silence alone ends turns: ``agent.turn_ends``), so a caller can tell
a turn the turn model held for its fallback from the rest; other replies (the greeting, idle prompts) carry none,
except under ``vad``, which every reply names.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


@dataclass
class ReplyPlayout:
    index: int
    response: int = 0  # the TTS response it belongs to (the spurts of one response share it)
    offset_ms: float = 0.0  # the response's audio sent before this spurt
    turn_end: str = ""  # what ended the turn this response answers ("": none known)
    sent_ms: float = 0.0
    heard_ms: float = 0.0
    complete: bool = False  # the end mark came back: the caller heard the whole reply
    cleared: bool = False  # cut short by a barge-in

    def as_dict(self) -> dict[str, object]:
        return {"index": self.index, "response": self.response, "sent_ms": round(self.sent_ms, 1),
                "heard_ms": round(self.heard_ms, 1),
                "complete": self.complete, "cleared": self.cleared, "turn_end": self.turn_end}


class MarkLedger:
    """Names marks, remembers where each sits, and turns echoes into heard positions."""

    def __init__(self, every_ms: float = 500.0, turn_end: Callable[[], str | None] | None = None):
        """``turn_end``: called as a new response begins, what ended the turn it answers (None: nothing new)."""
        self.every_ms = every_ms
        self._turn_end = turn_end
        self.replies: list[ReplyPlayout] = []
        self._pending: dict[str, tuple[ReplyPlayout, float, bool]] = {}
        self._dropped: set[str] = set()
        self._current: ReplyPlayout | None = None
        self._last_mark_ms = 0.0
        self._context: str | None = None  # the TTS context of the last audio
        self._responses = 0
        self.acked = 0

    @property
    def current(self) -> ReplyPlayout | None:
        return self._current

    def _mark(self, reply: ReplyPlayout, final: bool) -> str:
        by = f"{reply.turn_end}-" if reply.turn_end else ""
        name = f"r{reply.response}-{by}{int(reply.offset_ms + reply.sent_ms)}{'-end' if final else ''}"
        self._pending[name] = (reply, reply.sent_ms, final)
        self._last_mark_ms = reply.sent_ms
        return name

    def on_audio(self, duration_ms: float, context: str | None = None) -> str | None:
        """Audio went out (of TTS context ``context``, None when unknown); returns a mark name to send after it,
        when one is due."""
        if self._current is None:
            last = self.replies[-1] if self.replies else None
            if context is not None and context == self._context and last is not None:  # the same response goes on
                self._current = ReplyPlayout(len(self.replies), last.response, last.offset_ms + last.sent_ms,
                                             last.turn_end)
            else:
                turn_end = (self._turn_end() if self._turn_end is not None else None) or ""
                self._current = ReplyPlayout(len(self.replies), self._responses, turn_end=turn_end)
                self._responses += 1
            self.replies.append(self._current)
            self._last_mark_ms = 0.0
        self._context = context
        self._current.sent_ms += duration_ms
        if self._current.sent_ms - self._last_mark_ms >= self.every_ms:
            return self._mark(self._current, final=False)
        return None

    def end_reply(self) -> str | None:
        """The reply finished sending; returns the end mark's name (None if nothing was sent)."""
        reply, self._current = self._current, None
        return None if reply is None else self._mark(reply, final=True)

    def on_clear(self, buffered_ms: float) -> None:
        """The far end dropped ``buffered_ms`` of unplayed audio; pending marks won't be heard."""
        self._dropped.update(self._pending)
        reply = self._current or (self.replies[-1] if self.replies else None)
        if reply is not None and not reply.complete:
            reply.cleared = True
            reply.heard_ms = max(reply.heard_ms, reply.sent_ms - buffered_ms)
        self._current = None
        self._context = None  # what comes after a clear is a new response

    def on_echo(self, name: str) -> ReplyPlayout | None:
        """The provider echoed a mark; returns the reply it belongs to (None if unknown)."""
        entry = self._pending.pop(name, None)
        if entry is None:
            return None
        reply, at_ms, final = entry
        if name in self._dropped:
            self._dropped.discard(name)
            return reply
        self.acked += 1
        reply.heard_ms = max(reply.heard_ms, at_ms)
        reply.complete = reply.complete or final
        return reply
