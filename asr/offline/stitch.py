"""Put the words of each window back on the file's clock and group them into segments.

A window is pieces of the file played back to back (``plan``). Each word is placed by its
centre: the piece holding the centre maps the word's times to file time, and the word is
kept only if that piece owns the centre, so a word heard twice in the overlap around a cut
is kept exactly once.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable
from dataclasses import dataclass

from asr.offline.plan import Window
from asr.offline.results import Segment, Transcript, Word


@dataclass(frozen=True)
class SegmentRules:
    max_gap_s: float = 0.8  # a pause this long starts a new segment
    max_segment_s: float = 12.0  # a segment ends at the first word past this length
    min_sentence_s: float = 1.0  # a sentence end (. ? !) closes a segment at least this long


def place_words(window: Window, words: Iterable[Word], rate: int) -> list[Word]:
    """Map window-relative ``words`` to file time; drop those owned by a neighbouring piece."""
    offsets, total = [], 0
    for p in window.pieces:
        offsets.append(total)
        total += p.length
    placed: list[Word] = []
    for w in words:
        centre = w.center * rate
        i = max(0, bisect.bisect_right(offsets, centre) - 1)
        piece, base = window.pieces[i], offsets[i]
        file_centre = piece.start + (centre - base)
        if not piece.own_start <= file_centre < piece.own_stop:
            continue

        def to_file(t: float, piece=piece, base=base) -> float:
            return min(max(piece.start + (t * rate - base), piece.start), piece.stop) / rate

        placed.append(Word(to_file(w.start), to_file(w.end), w.text))
    return placed


def group_segments(words: list[Word], rules: SegmentRules | None = None) -> list[Segment]:
    rules = rules or SegmentRules()
    segments: list[list[Word]] = []
    for w in sorted(words, key=lambda w: w.start):
        if segments:
            cur = segments[-1]
            length = cur[-1].end - cur[0].start
            sentence_end = cur[-1].text.rstrip().endswith((".", "?", "!")) and length >= rules.min_sentence_s
            if w.start - cur[-1].end < rules.max_gap_s and length < rules.max_segment_s and not sentence_end:
                cur.append(w)
                continue
        segments.append([w])
    return [
        Segment(i, ws[0].start, ws[-1].end, "".join(w.text for w in ws).strip(), ws)
        for i, ws in enumerate(segments)
    ]


def build_transcript(words: list[Word], duration: float, language: str,
                     rules: SegmentRules | None = None) -> Transcript:
    segments = group_segments(words, rules)
    return Transcript(" ".join(s.text for s in segments).strip(), segments, duration, language)
