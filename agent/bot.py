"""The public API: a voice bot in one Python file.

::

    from agent.bot import Bot, Say

    bot = Bot("You are the front desk of a dental clinic.", greeting="Hello, how can I help?")

    @bot.tool
    def opening_hours(day: Literal["Monday", "Tuesday"]) -> Say:
        \"\"\"When the clinic is open on a day.\"\"\"
        return Say(f"On {day} we are open from nine to five.")

    if __name__ == "__main__":
        bot.run()

``python mybot.py`` (or ``cadence serve --bot mybot.py``) serves it on the WebRTC page and the
phone line; ``cadence talk --bot mybot.py caller.wav`` runs one turn from a file. Any keyword that
is not ``None`` overrides the config (``--config`` / ``--set`` / ``$CADENCE_...`` still apply
below it); ``settings`` takes any other config key, e.g. ``{"llm.base_url": "http://vllm:8000/v1"}``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from agent.config import Config, apply
from agent.tools import Call, Say, Tool, ToolDefinitionError, as_tools

__all__ = ["Bot", "Call", "Say", "Tool", "ToolDefinitionError"]


async def end_call(call: Call) -> Say:
    """Hang up. Call this when the caller says goodbye or has nothing more to ask."""
    await call.hang_up()
    return Say("")


class Bot:
    """A system prompt, a greeting, tools and stage choices: everything one bot needs."""

    cadence_bot = True  # what agent.bot_loader looks for

    def __init__(self, system_prompt: str | None = None, *, greeting: str | None = None,
                 tools: Sequence[Callable[..., Any] | Tool] = (), tool_choice: str | dict | None = None,
                 hang_up_tool: bool = False, goodbye: str | None = None, idle_after_s: float | None = None,
                 idle_prompt: str | None = None, max_call_s: float | None = None, filler: str | None = None,
                 transcripts_dir: str | None = None, webhook_url: str | None = None,
                 settings: Mapping[str, Any] | None = None) -> None:
        self._tools: list[Tool] = as_tools(list(tools))
        if hang_up_tool:
            self._tools = as_tools([*self._tools, end_call])
        self.tool_choice = tool_choice
        overrides = {"llm.system_prompt": system_prompt, "call.greeting": greeting, "call.goodbye": goodbye,
                     "call.idle_after_s": idle_after_s, "call.idle_prompt": idle_prompt,
                     "session.max_duration_s": max_call_s, "call.filler": filler,
                     "call.transcripts_dir": transcripts_dir, "call.webhook_url": webhook_url}
        self.settings: dict[str, Any] = {k: v for k, v in overrides.items() if v is not None}
        self.settings.update(settings or {})
        self.configure(Config())  # bad keys or values fail here, where the bot is defined

    @property
    def tools(self) -> list[Tool]:
        return list(self._tools)

    @property
    def tool_choice(self) -> str | dict | None:
        """What the LLM request carries: None (the server's default, "auto" with tools), "auto", "none",
        "required", or one tool forced (set by name)."""
        return _tool_choice(self._tool_choice, [t.name for t in self._tools])

    @tool_choice.setter
    def tool_choice(self, choice: str | dict | None) -> None:
        self._tool_choice = choice

    def tool(self, fn: Callable[..., Any] | None = None, *, name: str | None = None,
             description: str | None = None, filler: str | None = None) -> Any:
        """Decorator: offer a function to the LLM (``@bot.tool`` or ``@bot.tool(filler="Let me look.")``)."""

        def add(f: Callable[..., Any]) -> Callable[..., Any]:
            self._tools = as_tools([*self._tools, Tool.from_function(f, name=name, description=description,
                                                                     filler=filler)])
            return f

        return add(fn) if fn is not None else add

    def configure(self, config: Config) -> Config:
        """Apply this bot's settings on top of ``config`` (in place); returns it."""
        for dotted, value in self.settings.items():
            section, dot, key = dotted.partition(".")
            if not dot:
                raise ValueError(f"Bot settings: {dotted!r} is not section.key")
            apply(config, section, key, value, "Bot")
        return config

    async def serve(self, config: Config | None = None, ready: asyncio.Event | None = None,
                    stop: asyncio.Event | None = None) -> None:
        """Serve this bot (WebRTC page and phone line) until ``stop`` is set or SIGTERM/SIGINT.

        ``ready`` is set once it listens; ``config.server.port`` then holds the real port (0 picks one).
        """
        from agent.server_factory import make_server

        server = make_server(self.configure(config if config is not None else Config()))
        server.bot = self
        server.stop_event = stop
        await server.serve_forever(ready)

    def run(self, argv: Sequence[str] | None = None) -> int:
        """``cadence serve`` with this bot (``python mybot.py --port 8080 --set llm.max_tokens=48``)."""
        import sys

        from agent.commands import serve_bot

        code = serve_bot(self, list(sys.argv[1:] if argv is None else argv))
        if argv is None:
            sys.exit(code)
        return code


def _tool_choice(choice: str | dict | None, names: list[str]) -> str | dict | None:
    """None / "auto" / "none" / "required", a tool's name, or an OpenAI tool_choice object."""
    if choice is None or isinstance(choice, dict) or choice in ("auto", "none", "required"):
        return choice
    if choice not in names:
        raise ToolDefinitionError(f"tool_choice {choice!r}: no such tool (tools: {names})")
    return {"type": "function", "function": {"name": choice}}
