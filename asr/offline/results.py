"""What a transcription produces: words, segments and the whole transcript."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Word:
    """One word (or sub-word token run) on the file's clock, in seconds."""

    start: float
    end: float
    text: str  # carries its own leading space where the engine emitted one

    @property
    def center(self) -> float:
        return 0.5 * (self.start + self.end)


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
