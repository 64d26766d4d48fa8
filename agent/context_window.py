"""Keep a call's LLM context inside the model's window, however long the call.

Before each LLM request the context is measured (an estimate: characters / ``chars_per_token``,
plus a per-message overhead, plus the tool schemas the server puts in the prompt). Over the
budget (window - reply tokens - margin), the oldest turns are dropped until it is under
``refill_fraction`` of the budget: trimming well below the cap means the next several turns
append to an unchanged prefix, which llama.cpp and vLLM answer from their prefix cache, instead
of every turn shifting the prompt and paying for a full re-read. The trim itself costs a prefix
cache (vLLM, transformers) a re-read of the kept turns; the embedded llama.cpp server moves them
in its cache instead (``agent.llama_cache_reuse``), so there a trim costs what a turn costs.

Never dropped: system messages and the newest turn. Tool results that still matter survive
their turn: the newest result of each tool (with the assistant message that called it, as the
OpenAI protocol wants every tool result to follow its call) is kept until nothing else is
left to drop.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

Message = dict[str, Any]


@dataclass
class ContextWindow:
    window_tokens: int = 2048
    reply_tokens: int = 64
    margin_tokens: int = 96
    chars_per_token: float = 3.0  # conservative for English BPE (SmolLM2 measures ~4)
    per_message_tokens: int = 6  # role markers and separators
    refill_fraction: float = 0.6
    trims: int = 0  # how many times this call's context was trimmed
    last_estimate: int = 0  # the estimated size of the last context that went out

    @property
    def budget(self) -> int:
        return max(64, self.window_tokens - self.reply_tokens - self.margin_tokens)

    def estimate(self, messages: list[Message], tools: Any = None) -> int:
        text = sum(len(json.dumps(m.get("content"), ensure_ascii=False)) + len(json.dumps(m.get("tool_calls") or ""))
                   for m in messages)
        tools_text = len(json.dumps(tools, ensure_ascii=False, default=str)) if tools else 0
        return int((text + tools_text) / self.chars_per_token) + self.per_message_tokens * len(messages)

    def fit(self, messages: list[Message], tools: Any = None) -> list[Message] | None:
        """The messages trimmed to fit, or None when they already fit (nothing to change)."""
        self.last_estimate = self.estimate(messages, tools)
        if self.last_estimate <= self.budget:
            return None
        target = int(self.budget * self.refill_fraction)
        turns = _turns(messages)
        keep_last = turns[-1] if turns else []
        older = turns[:-1]
        pinned = _newest_tool_results(older)
        system = [m for m in messages if m.get("role") in ("system", "developer") and not _in_turn(m, turns)]
        # Drop unpinned old turns first (oldest first), then pinned ones, until under target.
        order = [i for i in range(len(older)) if i not in pinned] + sorted(pinned)
        dropped: set[int] = set()
        for i in order:
            kept = system + [m for j, t in enumerate(older) if j not in dropped for m in t] + keep_last
            if self.estimate(kept, tools) <= target:
                break
            dropped.add(i)
        self.trims += 1
        fitted = system + [m for j, t in enumerate(older) if j not in dropped for m in t] + keep_last
        self.last_estimate = self.estimate(fitted, tools)
        return fitted


def _turns(messages: list[Message]) -> list[list[Message]]:
    """Messages after the leading system prompt, grouped into turns: each starts at a user message
    (a turn's assistant replies, tool calls and tool results stay with it)."""
    start = 0
    while start < len(messages) and messages[start].get("role") in ("system", "developer"):
        start += 1
    turns: list[list[Message]] = []
    for m in messages[start:]:
        if m.get("role") == "user" or not turns:
            turns.append([m])
        else:
            turns[-1].append(m)
    return turns


def _in_turn(message: Message, turns: list[list[Message]]) -> bool:
    return any(message is m for t in turns for m in t)


def _newest_tool_results(turns: list[list[Message]]) -> set[int]:
    """Indexes of the turns holding the newest call of each tool."""
    newest: dict[str, int] = {}
    for i, turn in enumerate(turns):
        for m in turn:
            for call in m.get("tool_calls") or []:
                newest[call.get("function", {}).get("name", "")] = i
    return set(newest.values())
