"""Which Whisper transcripts read as a finished sentence (``agent.sentence_end``)."""

from __future__ import annotations

import pytest

from agent.sentence_end import reads_finished


@pytest.mark.parametrize("text", ["Hello.", "Goodbye.", " Thank you. ", "Agent.", "Is it open?", "Stop!",
                                  "Please enter your password, followed by the pound key.",
                                  "What are you looking for?", "I'm in."])
def test_finished_sentences(text: str) -> None:
    assert reads_finished(text)


@pytest.mark.parametrize("text", ["", "  ", "Hello", "I want to.", "Eight of spades and.", "It is for my.",
                                  "Wait...", "Well\u2026", "Um.", "The number you dialed,", "So."])
def test_unfinished_or_hanging(text: str) -> None:
    assert not reads_finished(text)
