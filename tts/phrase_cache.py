"""The audio of the bot's fixed phrases, synthesized once per process and replayed.

The greeting, the idle prompt, the goodbyes, the tool filler and the apologies are said word for word on many
calls. Without this, every caller who connects costs a greeting's synthesis (on a GPU engine: a batch slot
while other callers wait for their replies; on Piper: ~0.1-0.3 s of a core before the first audio). The
first call synthesizes a phrase; later ones replay the recorded engine pieces at once. Only a synthesis that
ran to its end is kept (a barge-in's cut one is not); LLM replies are never cached. One cache per engine
object, shared by every session of the process (``phrase_cache_for``).
"""

from __future__ import annotations

import contextlib
import weakref
from collections.abc import AsyncIterator, Iterable
from typing import Any

_CACHES: weakref.WeakKeyDictionary[Any, PhraseCache] = weakref.WeakKeyDictionary()


class PhraseCache:
    """Engine pieces of whole phrases, keyed by their exact (stripped) text."""

    def __init__(self, phrases: Iterable[str] = ()):
        self._phrases: set[str] = set()
        self._audio: dict[str, tuple[bytes, ...]] = {}
        self.hits = 0
        self.stored = 0
        self.add_phrases(phrases)

    def add_phrases(self, phrases: Iterable[str]) -> None:
        self._phrases.update(p.strip() for p in phrases if p and p.strip())

    def wants(self, text: str) -> bool:
        return text.strip() in self._phrases

    def get(self, text: str) -> tuple[bytes, ...] | None:
        audio = self._audio.get(text.strip())
        if audio is not None:
            self.hits += 1
        return audio

    async def replay(self, pieces: tuple[bytes, ...]) -> AsyncIterator[bytes]:
        for piece in pieces:
            yield piece

    async def recording(self, text: str, source: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
        """``source``'s pieces, passed on as they come; kept for ``text`` once the source is exhausted."""
        pieces: list[bytes] = []
        async with contextlib.aclosing(source):  # closed when this is (a barge-in withdraws the synthesis)
            async for piece in source:
                pieces.append(bytes(piece))
                yield piece
        if pieces and text.strip() not in self._audio:
            self._audio[text.strip()] = tuple(pieces)
            self.stored += 1

    @property
    def audio_bytes(self) -> int:
        return sum(len(p) for pieces in self._audio.values() for p in pieces)


def phrase_cache_for(engine: Any, phrases: Iterable[str]) -> PhraseCache | None:
    """The process's cache for ``engine`` (made on first use), knowing ``phrases`` too; None if the engine
    cannot be weakly referenced."""
    try:
        cache = _CACHES.get(engine)
        if cache is None:
            cache = _CACHES[engine] = PhraseCache()
    except TypeError:
        return None
    cache.add_phrases(phrases)
    return cache
