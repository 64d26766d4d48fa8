"""Load a bot file (``cadence serve --bot mybot.py``): run it as a module, find its ``Bot``."""

from __future__ import annotations

import runpy
from pathlib import Path
from typing import Any


class BotFileError(ValueError):
    """A bot file that cannot be loaded, with the reason in one line."""


def _is_bot(value: Any) -> bool:
    """An ``agent.bot.Bot`` (told by its marker: importing ``agent.bot`` here would close an import circle)."""
    return getattr(type(value), "cadence_bot", False) is True


def load_bot(path: str | Path) -> Any:
    """The ``Bot`` defined in ``path``: the one named ``bot``, else the only ``Bot`` at module level."""
    p = Path(path)
    if not p.is_file():
        raise BotFileError(f"bot file not found: {p}")
    try:
        names = runpy.run_path(str(p), run_name="cadence_bot")  # not "__main__": its bot.run() stays off
    except SyntaxError as exc:
        raise BotFileError(f"{p}: not valid Python: {exc}") from None
    except Exception as exc:
        raise BotFileError(f"{p}: failed while loading: {type(exc).__name__}: {exc}") from exc
    if _is_bot(names.get("bot")):
        return names["bot"]
    bots = [v for v in names.values() if _is_bot(v)]
    if len(bots) != 1:
        found = "no Bot" if not bots else f"{len(bots)} Bots and none named 'bot'"
        raise BotFileError(f"{p}: {found}; define one, e.g. bot = Bot(\"You are ...\")")
    return bots[0]
