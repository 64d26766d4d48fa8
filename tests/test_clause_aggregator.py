"""Clause-first text aggregation for TTS."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from agent.config import Config
from agent.pipeline import Engines, build_worker
from transports.file_transport import CallScript, FileTransport
from transports.params import transport_params
from tts.clause_aggregator import ClauseTextAggregator
from tts.service import CadenceTTSService


async def chunks(agg: ClauseTextAggregator, tokens: list[str]) -> list[str]:
    out = []
    for t in tokens:
        out += [a.text async for a in agg.aggregate(t)]
    last = await agg.flush()
    return out + ([last.text] if last and last.text else [])


async def test_first_clause_is_released_then_whole_sentences():
    agg = ClauseTextAggregator(min_words=4)
    tokens = ["Sure", ",", " I", " can", " help", " you", " with", " that", ",", " right",
              " away", ". ", "What", " is", " your", " number", ", please", "? ", "Thanks", "."]
    got = await chunks(agg, tokens)
    assert got[0] == "Sure, I can help you with that,"  # "Sure," alone is too short to speak
    assert got[1] == "right away."
    assert got[2] == "What is your number, please?"  # later commas do not split
    assert got[3] == "Thanks."


async def test_default_releases_a_two_word_opening_clause_but_not_a_lone_interjection():
    agg = ClauseTextAggregator()
    got = await chunks(agg, ["I'm", " sorry", ",", " but", " that", " is", " not", " valid", ". ", "Bye", "."])
    assert got == ["I'm sorry,", "but that is not valid.", "Bye."]
    got = await chunks(agg, ["Sure", ",", " I", " can", " help", ". "])
    assert got == ["Sure, I can help."]


async def test_line_breaks_and_long_unpunctuated_starts_are_released():
    agg = ClauseTextAggregator(min_words=4)
    got = await chunks(agg, ["Your", " code", " is", " ready", "\n", "Bye", "."])
    assert got[0] == "Your code is ready"
    words = " ".join(f"w{i}" for i in range(20)) + "."
    agg2 = ClauseTextAggregator(min_words=4)
    got2 = await chunks(agg2, [words])
    assert len(got2[0].split()) == 12 and got2[1].startswith("w12")


async def test_each_reply_starts_fresh_after_flush_or_interruption():
    agg = ClauseTextAggregator(min_words=2)
    assert await chunks(agg, ["One two, three."]) == ["One two,", "three."]
    assert await chunks(agg, ["Four five, six."]) == ["Four five,", "six."]
    [a async for a in agg.aggregate("Seven eight")]
    await agg.handle_interruption()
    assert await chunks(agg, ["Nine ten, eleven."]) == ["Nine ten,", "eleven."]


async def test_long_later_sentences_are_cut_at_clauses():
    agg = ClauseTextAggregator(min_words=4, later_min_words=10)
    text = ("Hello there, my friend. One two three four five six seven eight nine ten, "
            "eleven twelve. Short one, not cut.")
    got = await chunks(agg, [text])
    assert got == ["Hello there, my friend.", "One two three four five six seven eight nine ten,",
                   "eleven twelve.", "Short one, not cut."]


async def test_an_unpunctuated_first_clause_is_cut_at_max_first_words():
    words = " ".join(f"w{i}" for i in range(20)) + "."
    got = await chunks(ClauseTextAggregator(max_first_words=6), [words])
    assert got == [" ".join(f"w{i}" for i in range(6)), " ".join(f"w{i}" for i in range(6, 20)) + "."]
    # a clause mark before the limit still cuts first; the limit applies to the first clause only
    got = await chunks(ClauseTextAggregator(max_first_words=6), ["One two, three four five six seven eight."])
    assert got == ["One two,", "three four five six seven eight."]
    with pytest.raises(ValueError, match="max_first_words"):
        ClauseTextAggregator(min_words=4, max_first_words=3)


async def test_the_agent_pipeline_takes_the_limit_from_tts_first_clause_max_words():
    config = Config()
    config.tts.first_clause_max_words = 5
    engines = Engines(config, "http://127.0.0.1:9/v1", "none", tts_engine=_NoTTS())
    worker = build_worker(engines, FileTransport(transport_params(16000, 24000), CallScript([])))
    tts = next(p for p in _processors(worker.pipeline) if isinstance(p, CadenceTTSService))
    got = [a.text async for a in tts._text_aggregator.aggregate("a b c d e f g h ")]
    assert got == ["a b c d e"]


def _processors(processor: Any) -> Iterator[Any]:
    for p in processor.processors:
        yield p
        yield from _processors(p)


class _NoTTS:
    """Stands in for the voice: only the pipeline's TTS stage is looked at."""

    name, sample_rate = "none", 16000

    def synthesize(self, text: str) -> Iterator[bytes]:
        return iter(())
