"""Import a module that an extra may leave out: ``None`` when that module itself is missing.

A missing dependency *inside* an installed module still raises, so a broken install is not
mistaken for an absent extra.
"""

from __future__ import annotations

import importlib
from types import ModuleType


def import_optional(name: str) -> ModuleType | None:
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name and name.startswith(exc.name):
            return None
        raise
