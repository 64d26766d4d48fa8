"""The conversation as it happens, for the caller's page: sent over the WebRTC data channel.

Messages (JSON objects, ``type`` first):

- ``{"type": "heard", "text"}``: a transcript of the caller (one per VAD segment);
- ``{"type": "bot-text", "text"}``: a piece of the reply as the LLM streams it;
- ``{"type": "turn", "index", "heard", "said", "interrupted", "stages_ms", "server"}``: a finished
  turn with its stage times (``agent.turn_observer.TurnTiming.stages_ms``) and the server's
  admission state (e.g. ``"1/4 sessions"`` or ``"overloaded: ..."``).

A page that opened no data channel gets nothing (pipecat's connection drops what it cannot send).
The session's ``TurnObserver`` feeds it (``on_text``, ``on_turn``): a second pipeline observer would cost
every frame of the call another queue hop.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from loguru import logger

from agent.turn_observer import TurnTiming

Send = Callable[[dict[str, Any]], None]


class LiveFeed:
    """Sends transcripts and reply text as they come, and each turn's stage times when it ends."""

    def __init__(self, send: Send, server_state: Callable[[], str] | None = None) -> None:
        self._send = send
        self._server_state = server_state

    def _emit(self, message: dict[str, Any]) -> None:
        try:
            self._send(message)
        except Exception as exc:  # a closing connection: the page is gone, the call goes on
            logger.debug(f"live feed: {exc!r}")

    def on_text(self, kind: str, text: str) -> None:
        """``TurnObserver``'s ``on_text``: ``heard`` (a caller transcript) or ``bot-text`` (a reply piece)."""
        self._emit({"type": kind, "text": text})

    def on_turn(self, turn: TurnTiming) -> None:
        """``TurnObserver``'s ``on_turn``: the turn is over (answered or interrupted)."""
        self._emit({
            "type": "turn", "index": turn.index, "heard": turn.transcript_text,
            "said": turn.reply_text.strip(), "interrupted": turn.interrupted,
            "stages_ms": {k: round(v, 1) for k, v in turn.stages_ms().items()},
            "server": self._server_state() if self._server_state is not None else "",
        })
