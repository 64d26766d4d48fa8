"""Does a transcript read as a finished sentence? (Whisper punctuates what it hears.)

Used to end a turn that smart-turn judged unfinished: a short complete utterance ("Hello.",
"Goodbye.") often sounds unfinished to the audio model, which then waits its whole silence fallback.
A transcript counts as finished when it ends in ``!`` or ``?``, or in ``.`` (not an ellipsis) after a
last word that does not leave a sentence hanging (a conjunction, article, preposition, possessive or
filler: Whisper also writes "I want to." for a caller who paused mid-sentence).

``reads_unfinished`` is the stronger judgement the minimum quiet uses (``agent.quiet_turn_stop``): the last
sentence leaves the caller's thought hanging, so a pause after it is more likely mid-sentence. Either its
last word hangs, or it is a lone opening clause with no main clause after it: it starts with a subordinator
or an infinitive's "to" and holds no comma ("To leave a message.", "After the tone.", "If I want to cancel."),
which the ASR punctuates as a sentence when the caller pauses there. A question or exclamation never hangs.
"""

from __future__ import annotations

import re

HANGING_WORDS = frozenset({
    "and", "or", "but", "so", "because", "if", "than", "while", "although", "though", "unless",  # conjunctions
    "a", "an", "the", "my", "your", "our", "their",  # articles, possessives
    "to", "of", "for", "with", "from", "at", "by", "into",  # prepositions
    "um", "uh", "er", "erm", "hmm",  # fillers
})
# Words that open a clause needing a main clause after it (as the first word of a sentence).
CLAUSE_OPENERS = frozenset({
    "to", "after", "before", "when", "whenever", "if", "because", "since", "while", "although", "though",
    "unless", "until", "once", "whether",
})
_LAST_WORD = re.compile(r"([A-Za-z']+)\W*$")
_SENTENCES = re.compile(r"[^.!?\u2026]+[.!?\u2026]*")


def reads_finished(text: str) -> bool:
    """True when ``text`` ends a sentence: terminal punctuation and no hanging last word."""
    text = text.strip()
    if not text or text[-1] not in ".!?" or text.endswith("..") or text.endswith("\u2026"):
        return False
    if text[-1] in "!?":
        return True
    return not reads_unfinished(text)


def reads_unfinished(text: str) -> bool:
    """True when the last sentence of ``text`` hangs: a hanging last word, or a lone opening clause."""
    sentences = _SENTENCES.findall(text.strip())
    last = sentences[-1].strip() if sentences else ""
    if not last or last[-1] in "!?":
        return False
    word = _LAST_WORD.search(last)
    if word is not None and word.group(1).lower() in HANGING_WORDS:
        return True
    words = re.findall(r"[A-Za-z']+", last)
    return len(words) >= 2 and words[0].lower() in CLAUSE_OPENERS and "," not in last
