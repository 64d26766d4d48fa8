"""Cut text into the clauses that become one synthesis request each.

Sentences end at ``. ! ? …`` followed by a space (not after a common abbreviation or inside a number).
A sentence longer than ``max_words`` is cut further at ``, ; : —`` (at word boundaries where it has no
such mark); the first clause of a text is cut at its first such mark once it has ``first_min_words``
words, and after ``first_max_words`` words at the latest, so its audio (the caller's first audio)
comes back soonest.
"""

from __future__ import annotations

import re

_SENTENCE_END = re.compile(r"(?<=[.!?…])[\"”')\]]*\s+")
_CLAUSE_MARK = re.compile(r"(?<=[,;:—])\s*")
_ABBREVIATIONS = frozenset({"mr.", "mrs.", "ms.", "dr.", "st.", "jr.", "sr.", "vs.", "etc.", "e.g.", "i.e.",
                            "prof.", "inc.", "ltd.", "no.", "approx.", "dept.", "mt.", "ft."})


def sentences(text: str) -> list[str]:
    out: list[str] = []
    start = 0
    for match in _SENTENCE_END.finditer(text):
        head = text[start:match.start()]
        last = head.split()[-1].lower() if head.split() else ""
        if last in _ABBREVIATIONS:
            continue
        out.append(head.strip())
        start = match.end()
    out.append(text[start:].strip())
    return [s for s in out if s]


def _cut(sentence: str, min_words: int) -> list[str]:
    """Cut ``sentence`` at clause marks into pieces of at least ``min_words`` words."""
    pieces: list[str] = []
    current = ""
    for part in _CLAUSE_MARK.split(sentence):
        current = f"{current} {part}".strip() if current else part.strip()
        if len(current.split()) >= min_words and current[-1:] in ",;:—":
            pieces.append(current)
            current = ""
    if current:
        if pieces and len(current.split()) < max(2, min_words // 2):
            pieces[-1] = f"{pieces[-1]} {current}"
        else:
            pieces.append(current)
    return pieces


def _limit(pieces: list[str], max_words: int) -> list[str]:
    """Pieces of more than ``max_words`` words (no clause mark to cut at) cut at word boundaries."""
    out = []
    for piece in pieces:
        words = piece.split()
        out.extend(" ".join(words[i:i + max_words]) for i in range(0, len(words), max_words))
    return out


def clauses(text: str, first_min_words: int = 4, max_words: int = 24, first_max_words: int = 12) -> list[str]:
    """The text's synthesis units, in order; the first has at most ``first_max_words`` words."""
    out: list[str] = []
    for sentence in sentences(" ".join(text.split())):
        if not out and first_min_words > 0:
            first = _cut(sentence, first_min_words)
            head = _limit([first[0]], first_max_words)
            out.append(head[0])
            rest = " ".join(head[1:] + first[1:])
            if rest:
                out.extend(_limit(_cut(rest, max_words // 2) if len(rest.split()) > max_words else [rest], max_words))
        elif len(sentence.split()) > max_words:
            out.extend(_limit(_cut(sentence, max_words // 2), max_words))
        else:
            out.append(sentence)
    return out


def split_ids(ids: list[int], limit: int, space_id: int = 16) -> list[list[int]]:
    """Split an over-long id sequence at word boundaries (spaces) into pieces of at most ``limit``."""
    if len(ids) <= limit:
        return [ids]
    cut = max((i for i, x in enumerate(ids[: limit + 1]) if x == space_id), default=limit)
    cut = max(cut, 1)
    head, tail = ids[:cut], ids[cut + 1:] if ids[cut] == space_id else ids[cut:]
    return [head, *split_ids(tail, limit, space_id)] if tail else [head]
