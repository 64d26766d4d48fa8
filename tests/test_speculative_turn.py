"""``llm.speculate`` parsing and wiring (the behaviour against a real server: tests/parakeet/test_speculative_llm.py)."""

from __future__ import annotations

import pytest

from agent.config import Config
from agent.speculative_turn import (
    SpeculativeSpeechTimeoutStopStrategy,
    SpeculativeTurnAnalyzerStopStrategy,
    parse_triggers,
)


def test_triggers_parse_and_bad_names_fail_clearly():
    assert parse_triggers("") == frozenset() == parse_triggers("off")
    assert parse_triggers(" Final, pause ") == {"final", "pause"}
    with pytest.raises(ValueError, match=r"unknown trigger\(s\) \['eager'\].*known: pause, stable, final"):
        parse_triggers("final,eager")


def test_only_parakeet_turns_speculate():
    from agent.pipeline import make_turn_strategies

    config = Config()
    config.llm.speculate = "final"
    config.vad.turn = "silence"
    assert not isinstance(make_turn_strategies(config).stop[0], SpeculativeSpeechTimeoutStopStrategy)  # whisper
    config.asr.engine = "parakeet"
    assert isinstance(make_turn_strategies(config).stop[0], SpeculativeSpeechTimeoutStopStrategy)
    config.vad.turn = "smart"
    assert isinstance(make_turn_strategies(config).stop[0], SpeculativeTurnAnalyzerStopStrategy)
    config.llm.speculate = ""
    assert not isinstance(make_turn_strategies(config).stop[0], SpeculativeTurnAnalyzerStopStrategy)
