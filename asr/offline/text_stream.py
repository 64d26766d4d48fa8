"""Streamed transcription text: the transcript's text grown window by window, as deltas.

Words arrive per window in file order. Segments are grouped by the same left-to-right rules as
``stitch.group_segments``, and a segment followed by another never changes again, so only the
open (last) segment is regrouped when words arrive: the text after each window is exactly
``build_transcript`` of the words so far, and each text extends the previous one. The deltas
therefore join to the final transcript's text; work per window is proportional to its words.
"""

from __future__ import annotations

import json
from collections.abc import Iterable

from asr.offline.results import Transcript, Word
from asr.offline.stitch import SegmentRules, build_transcript, group_segments


class TextStream:
    def __init__(self, rules: SegmentRules | None = None) -> None:
        self.rules = rules
        self.words: list[Word] = []
        self._closed_text = ""  # " ".join of the closed segments' texts
        self._open: list[Word] = []  # the last segment's words
        self.sent = ""  # the text delivered so far

    def text(self) -> str:
        """``build_transcript(words).text`` for the words so far."""
        open_text = "".join(w.text for w in self._open).strip()
        return f"{self._closed_text} {open_text}".strip()

    def add(self, words: Iterable[Word]) -> str:
        """Take one window's words (file clock); return the text to send now ("" if none)."""
        new = list(words)
        if not new:
            return ""
        self.words.extend(new)
        segments = group_segments(self._open + new, self.rules)
        for seg in segments[:-1]:
            self._closed_text = f"{self._closed_text} {seg.text}" if self._closed_text else seg.text
        self._open = segments[-1].words
        text = self.text()
        if not text.startswith(self.sent):  # words out of file order; keep the rest for the end
            return ""
        delta, self.sent = text[len(self.sent):], text
        return delta

    def transcript(self, duration: float, language: str) -> Transcript:
        return build_transcript(self.words, duration, language, self.rules)


def sse(event: dict[str, object]) -> bytes:
    """One server-sent event carrying ``event`` as JSON (OpenAI's stream framing)."""
    return f"data: {json.dumps(event)}\n\n".encode()


def delta_event(text: str) -> bytes:
    return sse({"type": "transcript.text.delta", "delta": text})


def done_event(text: str) -> bytes:
    return sse({"type": "transcript.text.done", "text": text})
