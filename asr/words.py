"""The one ``Word`` every ASR path produces: Parakeet's tokenizer, the offline engines, the stitcher."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Word:
    """One word (or sub-word token run) with times in seconds.

    Parakeet's tokenizer gives window-relative words with bare text; the offline pipeline keeps
    words on the file's clock with the leading space the engine emitted (``offline_words``).
    """

    start: float
    end: float
    text: str  # carries its own leading space where the engine emitted one

    @property
    def center(self) -> float:
        return 0.5 * (self.start + self.end)
