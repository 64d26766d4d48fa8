"""JSON from untrusted peers, bounded in size and nesting depth.

``json.loads`` recurses once per nesting level: a 60 KB frame of ``[`` raises ``RecursionError``
(not a ``ValueError``), which used to kill the task that parsed it. ``loads_bounded`` turns that,
an oversized text and anything nested deeper than ``max_depth`` into ``JSONLimitError`` (a
``ValueError``), so every caller's existing "malformed JSON" path answers it.
"""

from __future__ import annotations

import json
from typing import Any

MAX_DEPTH = 16


class JSONLimitError(ValueError):
    """The text is not JSON, is too large, or is nested too deeply."""


def depth_exceeds(value: Any, max_depth: int) -> bool:
    """True when ``value`` nests containers more than ``max_depth`` deep (iterative: no recursion)."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        if depth > max_depth:
            return True
        stack.extend((child, depth + 1) for child in children if isinstance(child, (dict, list)))
    return False


def loads_bounded(text: str | bytes, *, max_bytes: int | None = None, max_depth: int = MAX_DEPTH) -> Any:
    """``json.loads`` that raises only ``JSONLimitError`` on bad, huge or deeply nested input."""
    if max_bytes is not None and len(text) > max_bytes:
        raise JSONLimitError(f"JSON text of {len(text)} bytes; the limit is {max_bytes}")
    try:
        value = json.loads(text)
    except RecursionError:
        raise JSONLimitError(f"JSON nested more than {max_depth} levels deep") from None
    except (ValueError, TypeError) as exc:  # JSONDecodeError, UnicodeDecodeError
        raise JSONLimitError(f"malformed JSON: {exc.args[0] if exc.args else exc}") from None
    if depth_exceeds(value, max_depth):
        raise JSONLimitError(f"JSON nested more than {max_depth} levels deep")
    return value
