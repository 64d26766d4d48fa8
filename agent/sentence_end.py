"""Does a transcript read as a finished sentence? (Whisper punctuates what it hears.)

Used to end a turn that smart-turn judged unfinished: a short complete utterance ("Hello.",
"Goodbye.") often sounds unfinished to the audio model, which then waits its whole silence fallback.
A transcript counts as finished when it ends in ``!`` or ``?``, or in ``.`` (not an ellipsis) after a
last word that does not leave a sentence hanging (a conjunction, article, preposition, possessive or
filler: Whisper also writes "I want to." for a caller who paused mid-sentence).
"""

from __future__ import annotations

import re

HANGING_WORDS = frozenset({
    "and", "or", "but", "so", "because", "if", "than", "while", "although", "though", "unless",  # conjunctions
    "a", "an", "the", "my", "your", "our", "their",  # articles, possessives
    "to", "of", "for", "with", "from", "at", "by", "into",  # prepositions
    "um", "uh", "er", "erm", "hmm",  # fillers
})
_LAST_WORD = re.compile(r"([A-Za-z']+)\W*$")


def reads_finished(text: str) -> bool:
    """True when ``text`` ends a sentence: terminal punctuation and no hanging last word."""
    text = text.strip()
    if not text or text[-1] not in ".!?" or text.endswith("..") or text.endswith("\u2026"):
        return False
    if text[-1] in "!?":
        return True
    word = _LAST_WORD.search(text)
    return word is None or word.group(1).lower() not in HANGING_WORDS
