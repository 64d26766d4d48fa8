"""Load a bot file (``cadence serve --bot mybot.py``): run it as a module, find its ``Bot``."""

from __future__ import annotations

import runpy
from pathlib import Path

from agent.bot import Bot


class BotFileError(ValueError):
    """A bot file that cannot be loaded, with the reason in one line."""


def load_bot(path: str | Path) -> Bot:
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
    if isinstance(names.get("bot"), Bot):
        return names["bot"]
    bots = [v for v in names.values() if isinstance(v, Bot)]
    if len(bots) != 1:
        found = "no Bot" if not bots else f"{len(bots)} Bots and none named 'bot'"
        raise BotFileError(f"{p}: {found}; define one, e.g. bot = Bot(\"You are ...\")")
    return bots[0]
