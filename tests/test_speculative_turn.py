"""``llm.speculate`` parsing and wiring (the behaviour against a real server: tests/parakeet/test_speculative_llm.py)."""

from __future__ import annotations

import pytest

from agent.config import Config
from agent.speculative_turn import (
    SpeculativeSegmentedTurnAnalyzerStopStrategy,
    SpeculativeSpeechTimeoutStopStrategy,
    SpeculativeStopMixin,
    SpeculativeTurnAnalyzerStopStrategy,
    parse_triggers,
)


def test_triggers_parse_and_bad_names_fail_clearly():
    assert parse_triggers("") == frozenset() == parse_triggers("off")
    assert parse_triggers(" Final, pause ") == {"final", "pause"} == parse_triggers("final+pause")
    with pytest.raises(ValueError, match=r"unknown trigger\(s\) \['eager'\].*known: pause, stable, final, quiet"):
        parse_triggers("final,eager")


def test_which_turns_speculate():
    """Parakeet on every trigger; Whisper and Moonshine (no partials) on finals only."""
    from agent.pipeline import make_turn_strategies

    config = Config()
    config.llm.speculate = "pause"
    config.vad.turn = "silence"
    assert not isinstance(make_turn_strategies(config).stop[0], SpeculativeSpeechTimeoutStopStrategy)  # whisper
    config.vad.turn = "smart"
    assert not isinstance(make_turn_strategies(config).stop[0], SpeculativeStopMixin)
    config.llm.speculate = "final"
    assert isinstance(make_turn_strategies(config).stop[0], SpeculativeSegmentedTurnAnalyzerStopStrategy)
    config.asr.engine = "moonshine"
    assert isinstance(make_turn_strategies(config).stop[0], SpeculativeSegmentedTurnAnalyzerStopStrategy)
    config.asr.engine = "parakeet"
    config.vad.turn = "silence"
    assert isinstance(make_turn_strategies(config).stop[0], SpeculativeSpeechTimeoutStopStrategy)
    config.vad.turn = "smart"
    assert isinstance(make_turn_strategies(config).stop[0], SpeculativeTurnAnalyzerStopStrategy)
    config.llm.speculate = ""
    assert not isinstance(make_turn_strategies(config).stop[0], SpeculativeTurnAnalyzerStopStrategy)


def test_the_minimum_quiet_holds_segmented_turns_only():
    """``vad.turn_min_quiet_secs`` reaches Whisper's and Moonshine's stop strategies, speculating or not;
    Parakeet's are unchanged. 0 turns it off."""
    from agent.pipeline import make_turn_strategies
    from agent.quiet_turn_stop import QuietTurnEndMixin

    config = Config()
    for engine, speculate in [("whisper", "final"), ("moonshine", "final"), ("moonshine", "")]:
        config.asr.engine, config.llm.speculate = engine, speculate
        stop = make_turn_strategies(config).stop[0]
        assert isinstance(stop, QuietTurnEndMixin) and stop._min_quiet == config.vad.turn_min_quiet_secs == 0.45
    config.vad.turn_min_quiet_secs = 0.0
    assert make_turn_strategies(config).stop[0]._min_quiet is None
    config.asr.engine, config.llm.speculate = "parakeet", "final"
    assert not isinstance(make_turn_strategies(config).stop[0], QuietTurnEndMixin)


def test_the_stt_follows_chunk_levels_only_where_pauses_are_marked(tmp_path):
    """``asr.final_from_pause`` reads every chunk's level; without the quiet trigger no pause partial comes, so the
    Parakeet STT is built without it."""
    pytest.importorskip("torch")
    from agent.pipeline import Engines
    from asr.parakeet.tiny import make_tiny_checkpoint

    config = Config()
    config.asr.engine, config.asr.model = "parakeet", str(make_tiny_checkpoint(tmp_path / "ckpt", vocab_size=64,
                                                                             layers=1, seed=0))
    config.asr.device, config.asr.dtype, config.asr.encoder_backend = "cpu", "float32", "eager"
    engines = Engines(config, "http://127.0.0.1:9", "model", tts_engine=None)  # only its STT is built here
    assert not engines.make_stt().final_from_pause  # llm.speculate = "final"
    config.llm.speculate = "final+quiet"
    assert engines.make_stt().final_from_pause
    config.asr.final_from_pause = False
    assert not engines.make_stt().final_from_pause


def test_every_turn_stop_strategy_notes_its_turn_ends_for_the_transport():
    """``note_turn_ends`` gives the call's stop strategies and the transport's output one note; with the VAD's
    silence alone ending turns (no turn model) every reply names ``vad``, so no turn counts as a fallback's."""
    from types import SimpleNamespace

    from agent.pipeline import make_turn_strategies, note_turn_ends
    from agent.turn_ends import TurnEndNote, VadTurnEnds

    output = SimpleNamespace(turn_end_note=None)
    transport = SimpleNamespace(output=lambda: output)
    config = Config()
    config.asr.engine = "parakeet"
    for speculate in ("", "final"):
        config.llm.speculate, config.vad.turn = speculate, "smart"
        strategies = make_turn_strategies(config)
        note = note_turn_ends(strategies, transport)
        assert type(note) is TurnEndNote and output.turn_end_note is note
        assert all(s.turn_end_note is note for s in strategies.stop)
        config.vad.turn = "silence"
        note = note_turn_ends(make_turn_strategies(config), transport)
        assert isinstance(note, VadTurnEnds) and output.turn_end_note is note and note.take() == "vad"
