"""Which Whisper transcripts read as a finished sentence (``agent.sentence_end``)."""

from __future__ import annotations

import pytest

from agent.sentence_end import reads_finished, reads_unfinished


@pytest.mark.parametrize("text", ["Hello.", "Goodbye.", " Thank you. ", "Agent.", "Is it open?", "Stop!",
                                  "Please enter your password, followed by the pound key.",
                                  "What are you looking for?", "I'm in."])
def test_finished_sentences(text: str) -> None:
    assert reads_finished(text)


@pytest.mark.parametrize("text", ["", "  ", "Hello", "I want to.", "Eight of spades and.", "It is for my.",
                                  "Wait...", "Well\u2026", "Um.", "The number you dialed,", "So."])
def test_unfinished_or_hanging(text: str) -> None:
    assert not reads_finished(text)


@pytest.mark.parametrize("text", ["To leave a message.", "After the tone.", "If I want to cancel.",
                                  "Thank you. When I call back", "I want to.", "I want to", "It is for my",
                                  "Because the line was busy."])
def test_hanging_thoughts_read_unfinished(text: str) -> None:
    assert reads_unfinished(text) and not reads_finished(text)


@pytest.mark.parametrize("text", ["", "Hello.", "Goodbye", "Thank you.", "After the tone, say your name.",
                                  "To leave a message, press one.", "When is it open?", "If only!",
                                  "Please enter your password, followed by the pound key.", "I'm in.",
                                  "To leave a message. Press one.", "Once."])
def test_finished_or_undecided_text_does_not_read_unfinished(text: str) -> None:
    assert not reads_unfinished(text)
