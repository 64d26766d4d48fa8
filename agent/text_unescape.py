"""HTML character references in streamed LLM text, decoded before the TTS reads them.

Some small models (SmolLM2 through llama.cpp) write ``that&#39;s`` or ``Q&amp;A``; a TTS then speaks
"ampersand hash thirty-nine". Only complete references with their semicolon are decoded (``AT&T`` and
``R&D`` stay as written). A reference split across streamed tokens (``that&#`` + ``39;s``) is held back
until the next token completes or rules it out, or the reply ends (``flush``).
"""

from __future__ import annotations

import html
import re

_REFERENCE = re.compile(r"&(?:#[0-9]{1,7}|#[xX][0-9a-fA-F]{1,6}|[A-Za-z][A-Za-z0-9]{1,31});")
_OPEN_TAIL = re.compile(r"&(?:#[0-9]{0,7}|#[xX][0-9a-fA-F]{0,6}|[A-Za-z][A-Za-z0-9]{0,31})?$")


def unescape_references(text: str) -> str:
    """``text`` with its complete character references decoded."""
    return _REFERENCE.sub(lambda m: html.unescape(m.group(0)), text) if "&" in text else text


class StreamUnescaper:
    """Decodes references across a stream of text pieces (one per reply; ``flush`` at its end)."""

    def __init__(self) -> None:
        self._held = ""

    def feed(self, piece: str) -> str:
        """The decodable part of everything so far; a possible reference at the end waits for more."""
        text = self._held + piece
        if "&" not in text:
            self._held = ""
            return text
        tail = _OPEN_TAIL.search(text)
        cut = tail.start() if tail is not None else len(text)
        self._held = text[cut:]
        return unescape_references(text[:cut])

    def flush(self) -> str:
        """What was held back (the reply ended: it was not a reference)."""
        held, self._held = self._held, ""
        return held
