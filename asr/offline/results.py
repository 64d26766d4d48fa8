"""What a transcription produces: words, segments and the whole transcript."""

from __future__ import annotations

from dataclasses import dataclass, field

from asr.words import Word

__all__ = ["Segment", "Transcript", "Word"]


@dataclass
class Segment:
    id: int
    start: float
    end: float
    text: str
    words: list[Word] = field(default_factory=list)


@dataclass
class Transcript:
    text: str
    segments: list[Segment]
    duration: float  # seconds of audio in the file
    language: str = "en"

    @property
    def words(self) -> list[Word]:
        return [w for s in self.segments for w in s.words]
