"""Speak on the first clause, not the first sentence.

Stock pipecat gathers a whole sentence before synthesis; on a long first sentence that is
most of a second of silence. This aggregator releases the first clause of each reply as
soon as a comma, semicolon, colon or dash closes at least ``min_words`` words, then falls
back to sentence boundaries so later audio keeps natural prosody.

``min_words`` is 2: small models open most apologies with "I'm sorry," and the rest of that first
sentence is another 8-15 tokens plus a longer synthesis while the LLM keeps the cores busy
(200-500 ms from first token to first audio, bench/results/webrtc_latency_cpu_webrtc16_*). A lone
interjection ("Sure,", "Well,") is still joined to what follows.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from pipecat.utils.text.base_text_aggregator import Aggregation, TextType
from pipecat.utils.text.simple_text_aggregator import SimpleTextAggregator

CLAUSE_MARKS = frozenset(",;:\n\u2014")
# A first chunk with no punctuation at all is released at a word boundary after this many words
# (``tts.first_clause_max_words``).
MAX_FIRST_WORDS = 12


class ClauseTextAggregator(SimpleTextAggregator):
    """Sentence aggregation whose first chunk per reply may end at a clause mark."""

    def __init__(self, min_words: int = 2, later_min_words: int = 10, max_first_words: int = MAX_FIRST_WORDS,
                 **kwargs):
        super().__init__(**kwargs)
        if max_first_words < max(1, min_words):
            raise ValueError(f"max_first_words ({max_first_words}) must be at least min_words ({min_words}) and >= 1")
        self._min_words = min_words
        self._max_first_words = max_first_words
        # Later chunks are sentences, but a long sentence is cut at a clause mark once it holds
        # this many words, so synthesis of a long sentence does not leave a gap in playback.
        self._later_min_words = later_min_words
        self._first_sent = False

    async def aggregate(self, text: str) -> AsyncIterator[Aggregation]:
        for char in text:
            self._text += char
            result = await self._check_sentence_with_lookahead(char)
            words = len(self._text.split()) if result is None and char in CLAUSE_MARKS | {" "} else 0
            if not self._first_sent:
                cut = (char in CLAUSE_MARKS and words >= self._min_words) or (char == " " and words >= self._max_first_words)
            else:
                cut = char in CLAUSE_MARKS and words >= self._later_min_words
            if words and cut:
                result = Aggregation(text=self._text.strip(), type=TextType.SENTENCE)
                self._text = ""
            if result is not None:
                self._first_sent = True
                yield result

    async def flush(self) -> Aggregation | None:
        self._first_sent = False
        return await super().flush()

    async def handle_interruption(self):
        self._first_sent = False
        await super().handle_interruption()

    async def reset(self):
        self._first_sent = False
        await super().reset()
