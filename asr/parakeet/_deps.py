"""One place that turns a missing optional dependency into an actionable ImportError."""

from __future__ import annotations

import importlib
from types import ModuleType

EXTRA_HINT = "pip install 'cadence[parakeet]'"


def require(module: str) -> ModuleType:
    """Import ``module`` or raise an ImportError that names the extra to install."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise ImportError(f"the Parakeet engine needs {module!r}: {EXTRA_HINT}") from exc
