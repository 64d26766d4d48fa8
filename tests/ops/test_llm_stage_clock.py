"""The LLM stage's clock starts when the reply can be asked for: the final transcript or the end of the user turn,
whichever is later. Runs 66-68's llm_first_token p95-p99 (735-786 ms at 64-256 callers alike, p50 70-249 ms) match
the turn detector's 0.8 s silence fallback counted from the transcript."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from pipecat.frames.frames import (
    BotStartedSpeakingFrame,
    LLMTextFrame,
    TranscriptionFrame,
    TTSAudioRawFrame,
    TTSStartedFrame,
    UserStoppedSpeakingFrame,
    VADUserStoppedSpeakingFrame,
)
from pipecat.observers.base_observer import FramePushed
from pipecat.processors.frame_processor import FrameDirection

from agent.metrics.observer import MetricsObserver
from agent.metrics.stages import StageMetrics, llm_asked, turn_stages_ms

_SOURCE = SimpleNamespace(get_clock=lambda: SimpleNamespace(_time=0))


def _stages(events: list[tuple[float, object]]) -> dict[str, list[float]]:
    """The stage samples one call's observer records for ``events`` ((seconds, frame), in push order)."""
    metrics, samples = StageMetrics(), {}
    metrics.add_listener(lambda stage, value, _now: samples.setdefault(stage, []).append(value))
    observer = MetricsObserver(metrics)

    async def feed() -> None:
        for at, frame in events:
            await observer.on_push_frame(FramePushed(_SOURCE, _SOURCE, frame, FrameDirection.DOWNSTREAM,
                                                     int(at * 1e9)))

    asyncio.run(feed())
    return samples


def _turn(transcript_at: float, turn_end_at: float, token_at: float) -> dict[str, list[float]]:
    events = [(10.2, VADUserStoppedSpeakingFrame(stop_secs=0.2)),
              (transcript_at, TranscriptionFrame("hello there", "caller", "now")),
              (turn_end_at, UserStoppedSpeakingFrame()),
              (token_at, LLMTextFrame("Hi"))]
    return _stages(sorted(events, key=lambda e: e[0]))


def test_a_turn_that_waits_for_the_turn_detector_times_the_llm_from_the_turn_end() -> None:
    samples = _turn(transcript_at=10.25, turn_end_at=11.0, token_at=11.08)  # the 0.8 s silence fallback
    assert [round(v) for v in samples["llm_first_token"]] == [80]
    assert [round(v) for v in samples["turn_end"]] == [1000]
    assert [round(v) for v in samples["asr_final"]] == [250]


def test_a_transcript_after_the_turn_end_times_the_llm_from_the_transcript() -> None:
    samples = _turn(transcript_at=10.4, turn_end_at=10.3, token_at=10.55)
    assert [round(v) for v in samples["llm_first_token"]] == [150]


def test_the_reply_stages_add_up_to_the_first_audio() -> None:
    """Turn end, LLM first token, first clause, TTS first audio and the output's start leave no gap in first_audio."""
    events = [(10.2, VADUserStoppedSpeakingFrame(stop_secs=0.2)),
              (10.22, TranscriptionFrame("hello there", "caller", "now")),
              (10.25, UserStoppedSpeakingFrame()),
              (10.31, LLMTextFrame("Well")),
              (10.45, TTSStartedFrame()),  # the first clause's words took 140 ms to arrive
              (10.49, TTSAudioRawFrame(b"\0" * 480, 24000, 1)),
              (10.52, BotStartedSpeakingFrame())]
    samples = {k: [round(v) for v in vs] for k, vs in _stages(events).items()}
    assert samples["first_clause"] == [140] and samples["tts_first_audio"] == [40] and samples["audio_out"] == [30]
    parts = samples["turn_end"][0] + samples["llm_first_token"][0] + samples["first_clause"][0]
    assert parts + samples["tts_first_audio"][0] + samples["audio_out"][0] == samples["first_audio"][0] == 520


def test_the_turn_timeline_uses_the_same_clock() -> None:
    t = SimpleNamespace(transcript=10.25, turn_end=11.0, llm_first_token=11.08, tts_start=None, tts_first_audio=None,
                        first_audio_out=None, end_of_speech=10.0)
    assert round(turn_stages_ms(t)["llm_first_token"]) == 80
    t.tts_start, t.tts_first_audio, t.first_audio_out = 11.2, 11.25, 11.3
    stages = turn_stages_ms(t)
    assert (round(stages["first_clause"]), round(stages["audio_out"]), round(stages["first_audio"])) == (120, 50, 1300)
    assert llm_asked(10.4, 10.3) == 10.4 and llm_asked(10.4, None) == 10.4 and llm_asked(None, 10.3) is None
