"""The finished-sentence end of turn on the streaming path (Parakeet: one punctuated final at the VAD stop).

Smart-turn v3 (the real bundled model) calls Asterisk's recorded "Hello world." unfinished, so without the
rule the turn ends only when its silence fallback has counted ``vad.turn_fallback_secs`` of quiet audio;
with ``vad.turn_finished_text_secs`` the final "Hello world." ends it 0.3 s past the VAD stop instead of 0.8 s. The turn
strategies are the agent's own (``make_turn_strategies`` for ``asr.engine = "parakeet"``, with and without
speculation), inside pipecat's user aggregator; audio after the VAD stop is fed in real time, as a
transport does, because the fallback counts audio, not wall time.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

import numpy as np
import pytest
from pipecat.frames.frames import (
    Frame,
    InputAudioRawFrame,
    LLMContextFrame,
    TranscriptionFrame,
    UserStoppedSpeakingFrame,
    VADUserStartedSpeakingFrame,
    VADUserStoppedSpeakingFrame,
)
from pipecat.pipeline.pipeline import Pipeline
from pipecat.pipeline.worker import PipelineParams
from pipecat.processors.aggregators.llm_context import LLMContext
from pipecat.processors.aggregators.llm_response_universal import (
    LLMUserAggregatorParams,
)
from pipecat.processors.frame_processor import FrameDirection, FrameProcessor
from pipecat.tests.utils import SleepFrame, run_test
from pipecat.utils.time import time_now_iso8601

from agent.capacity.corpus import ASTERISK_DIR
from agent.config import Config
from agent.finished_text_stop import FinishedTextStopMixin
from agent.pipeline import make_turn_strategies
from agent.turn_ends import BY, TURN_ENDS, count_stop_timeouts
from agent.user_aggregator import CadenceAggregatorPair
from transports.audio_io import load_audio

CLIP = ASTERISK_DIR / "hello-world.wav"
FRAME = 320  # 20 ms at 16 kHz
STOP_SECS = 0.2


class Stamped(FrameProcessor):
    """Notes when the user aggregator ends the turn (a speculative reply's context frame comes earlier)."""

    def __init__(self) -> None:
        super().__init__()
        self.turn_end_at: list[float] = []
        self.speculation_at: list[float] = []
        self.contexts = 0  # LLM requests the aggregator sent (speculative or not)

    async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
        await super().process_frame(frame, direction)
        if isinstance(frame, UserStoppedSpeakingFrame) and direction == FrameDirection.DOWNSTREAM:
            self.turn_end_at.append(time.time())
        if isinstance(frame, LLMContextFrame):
            self.contexts += 1
            if frame.speculation:
                self.speculation_at.append(time.time())
        await self.push_frame(frame, direction)


class StopAt(FrameProcessor):
    """Stamps the VAD stop with the wall time it passes (the strategy times its rule from it)."""

    def __init__(self) -> None:
        super().__init__()
        self.vad_stop_at: float | None = None

    async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
        await super().process_frame(frame, direction)
        if isinstance(frame, VADUserStoppedSpeakingFrame):
            frame.timestamp = self.vad_stop_at = time.time()
        await self.push_frame(frame, direction)


def _audio(samples: np.ndarray, pace_s: float) -> list[Frame]:
    pcm = (np.clip(samples, -1, 1) * 32767).astype(np.int16)
    out: list[Frame] = []
    for lo in range(0, len(pcm), FRAME):
        out.append(InputAudioRawFrame(audio=pcm[lo : lo + FRAME].tobytes(), sample_rate=16000, num_channels=1))
        if pace_s:
            out.append(SleepFrame(sleep=pace_s))
    return out


async def _turn_end_after_vad_stop(finished_secs: float, speculate: str,
                                   engine: str = "parakeet") -> tuple[float, int, float | None, dict[str, int]]:
    """Turn end after the VAD stop (s), whether the rule ended it, the speculative request's lead on the
    turn end (s; None: no speculation) and the process's turn-end counts it added (``agent.turn_ends``).
    Whisper's one final per VAD segment comes as Parakeet's does here."""
    before = dict(TURN_ENDS)
    config = Config()
    config.asr.engine = engine
    config.llm.speculate = speculate
    config.vad.turn_finished_text_secs = finished_secs
    strategies = make_turn_strategies(config)
    stop = strategies.stop[0]
    assert isinstance(stop, FinishedTextStopMixin)
    speech = load_audio(CLIP, 16000)
    quiet = np.zeros(int(16000 * STOP_SECS), np.float32)
    final = TranscriptionFrame("Hello world.", "caller", time_now_iso8601())
    final.finalized = True
    frames = [VADUserStartedSpeakingFrame(start_secs=0.1), *_audio(speech, 0.0), *_audio(quiet, 0.0),
              VADUserStoppedSpeakingFrame(stop_secs=STOP_SECS), final,
              *_audio(np.zeros(16000 * 2, np.float32), 0.02)]  # 2 s of quiet, in real time
    pair = CadenceAggregatorPair(LLMContext(), user_params=LLMUserAggregatorParams(user_turn_strategies=strategies))
    vad, out = StopAt(), Stamped()
    await run_test(Pipeline([vad, pair.user(), out]), frames_to_send=frames,
                   pipeline_params=PipelineParams(audio_in_sample_rate=16000))
    assert vad.vad_stop_at is not None and out.turn_end_at, "the turn never ended"
    lead = out.turn_end_at[0] - out.speculation_at[0] if out.speculation_at else None
    added = {by: TURN_ENDS[by] - before.get(by, 0) for by in BY}
    return out.turn_end_at[0] - vad.vad_stop_at, stop.ended_on_finished_text, lead, added


@pytest.mark.skipif(not CLIP.is_file(), reason="needs asterisk-core-sounds-en-wav (installed by scripts/install.sh)")
@pytest.mark.parametrize(("engine", "speculate"), [("parakeet", "final"), ("parakeet", ""), ("whisper", "final")])
def test_a_finished_final_ends_the_turn_before_smart_turns_fallback(engine, speculate):
    without, by_rule_off, lead_off, ends_off = asyncio.run(_turn_end_after_vad_stop(-1.0, speculate, engine))
    with_rule, by_rule, lead, ends = asyncio.run(_turn_end_after_vad_stop(0.3, speculate, engine))
    # the turn-end counts say which path ended each turn: the fallback's silence, then the rule
    assert ends_off == {"model": 0, "silence": 1, "finished_text": 0, "no_words": 0, "timeout": 0}, ends_off
    assert ends == {"model": 0, "silence": 0, "finished_text": 1, "no_words": 0, "timeout": 0}, ends
    print(f"{engine} speculate={speculate!r}: turn end {with_rule * 1000:.0f} ms after the VAD stop with the rule, "
          f"{without * 1000:.0f} ms without; speculative request {lead} s before it")
    # With speculation the reply is requested on the final once smart-turn has called the turn unfinished
    # (its inference takes ~0.1-0.2 s past the VAD stop), while the rule or the fallback still holds the turn.
    if speculate:
        assert lead is not None and lead >= 0.05 and lead_off is not None and lead_off >= 0.3, (lead, lead_off)
    else:
        assert lead is None and lead_off is None
    # The precondition: smart-turn called it unfinished, so only the fallback (0.8 s of quiet audio counted
    # from the VAD stop: 814-816 ms here) ended the turn without the rule.
    assert by_rule_off == 0 and without >= 0.5, f"smart-turn ended the turn at once ({without:.2f} s)"
    assert by_rule == 1
    assert 0.25 <= with_rule <= 0.45, f"the finished final ended the turn {with_rule:.2f} s after the VAD stop"


@dataclass
class TurnRun:
    """What one caller turn through the agent's stop strategies inside pipecat's user aggregator left."""

    added: dict[str, int]  # the turn-end counts it added (``agent.turn_ends``)
    turn_end_at: list[float]
    vad_stop_at: float | None
    contexts: int  # LLM requests the aggregator sent
    messages: list  # the LLM context after it
    unended: list[str]  # what the stop strategy had seen of turns something else ended


def _final(text: str) -> TranscriptionFrame:
    frame = TranscriptionFrame(text, "caller", time_now_iso8601())
    frame.finalized = True
    return frame


def _spoken() -> list[Frame]:
    """The recorded "Hello world." and the VAD's 0.2 s stop window of quiet, as the VAD stops there."""
    quiet = np.zeros(int(16000 * STOP_SECS), np.float32)
    return [VADUserStartedSpeakingFrame(start_secs=0.1), *_audio(load_audio(CLIP, 16000), 0.0), *_audio(quiet, 0.0),
            VADUserStoppedSpeakingFrame(stop_secs=STOP_SECS)]


def _run_turn(config: Config, frames: list[Frame], stop_timeout_s: float) -> TurnRun:
    """``frames`` then 2 s of quiet in real time through ``config``'s turn strategies, pipecat's stop timeout at
    ``stop_timeout_s`` (past the 0.8 s fallback, as 5 s is)."""

    async def run() -> TurnRun:
        before = dict(TURN_ENDS)
        strategies = make_turn_strategies(config)
        context = LLMContext()
        pair = CadenceAggregatorPair(context, user_params=LLMUserAggregatorParams(
            user_turn_strategies=strategies, user_turn_stop_timeout=stop_timeout_s))
        count_stop_timeouts(pair.user(), "test")
        vad, out = StopAt(), Stamped()
        await run_test(Pipeline([vad, pair.user(), out]),
                       frames_to_send=[*frames, *_audio(np.zeros(int(16000 * 2.0), np.float32), 0.02)],
                       pipeline_params=PipelineParams(audio_in_sample_rate=16000))
        return TurnRun({by: TURN_ENDS[by] - before.get(by, 0) for by in BY}, out.turn_end_at, vad.vad_stop_at,
                       out.contexts, context.get_messages(), strategies.stop[0].unended)

    return asyncio.run(run())


def _config(engine: str, speculate: str = "final", finished_text_secs: float | None = None) -> Config:
    config = Config()
    config.asr.engine, config.llm.speculate = engine, speculate
    if finished_text_secs is not None:
        config.vad.turn_finished_text_secs = finished_text_secs
    return config


@pytest.mark.skipif(not CLIP.is_file(), reason="needs asterisk-core-sounds-en-wav (installed by scripts/install.sh)")
def test_a_turn_without_transcript_text_is_counted_as_ended_by_the_stop_timeout():
    """Run 64: three turns waited for pipecat's user_turn_stop_timeout (5 s). Such a turn is counted (``timeout``),
    and the stop strategy says what it had seen (here: the analyzer's verdict but no transcript text)."""
    run = _run_turn(_config("parakeet"), _spoken(), 1.2)  # and no transcript
    added, turn_ends, unended = run.added, run.turn_end_at, run.unended
    # the strategy says what held the turn: the silence fallback's verdict was in, the transcript text was not
    assert len(unended) == 1 and "text=''" in unended[0] and "turn_complete=True" in unended[0], unended
    assert "vad_stopped=True" in unended[0], unended
    # smart-turn calls "Hello world." unfinished, its 0.8 s fallback of quiet then says complete (counted as
    # silence), but with no text the strategy does not end the turn: pipecat's timeout does
    assert added == {"model": 0, "silence": 1, "finished_text": 0, "no_words": 0, "timeout": 1}, added
    assert len(turn_ends) == 1


@pytest.mark.skipif(not CLIP.is_file(), reason="needs asterisk-core-sounds-en-wav (installed by scripts/install.sh)")
@pytest.mark.parametrize(("engine", "speculate"), [("parakeet", "final"), ("parakeet", ""), ("whisper", "final")])
def test_an_empty_final_with_no_words_before_it_ends_the_turn_at_once(engine, speculate):
    """Runs 66-68: each of their 5 s stop timeouts came 4.9-5.0 s after an empty final of the random-weight
    Parakeet. The ASR's one final per segment, empty when it heard no words, now ends such a turn on arrival
    (``no_words``). What the aggregator does with a turn without words is pipecat's, as after the timeout: no user
    message; this one came before the bot had finished speaking, so it counts as interrupting the bot and
    ``EmptyUserTurnConfig`` runs the LLM once on its "ask them to repeat" prompt."""
    run = _run_turn(_config(engine, speculate), [*_spoken(), _final("")], 1.2)
    added, turn_ends, vad_stop_at, contexts, messages = (run.added, run.turn_end_at, run.vad_stop_at, run.contexts,
                                                         run.messages)
    assert added["no_words"] == 1 and added["timeout"] == 0 and added["finished_text"] == 0, added
    assert len(turn_ends) == 1 and vad_stop_at is not None
    # at once: before smart-turn's 0.8 s silence fallback, let alone the stop timeout
    assert turn_ends[0] - vad_stop_at < 0.5, turn_ends[0] - vad_stop_at
    assert not [m for m in messages if m.get("role") == "user"], messages
    assert contexts == 1 and [m["role"] for m in messages] == ["developer"], messages
    assert "repeat" in messages[0]["content"]


@pytest.mark.skipif(not CLIP.is_file(), reason="needs asterisk-core-sounds-en-wav (installed by scripts/install.sh)")
def test_an_empty_final_after_words_in_the_same_turn_keeps_them():
    """An empty final of a second segment must not wipe the first segment's words (pipecat's logic would take it
    as the turn's text): the turn still ends on "Hello world." and asks the LLM once."""
    quiet = np.zeros(int(16000 * STOP_SECS), np.float32)
    frames = [*_spoken(), _final("Hello world."),
              VADUserStartedSpeakingFrame(start_secs=0.1), *_audio(quiet, 0.0),  # a breath, no words
              VADUserStoppedSpeakingFrame(stop_secs=STOP_SECS), _final("")]
    run = _run_turn(_config("parakeet", "", finished_text_secs=0.3), frames, 1.5)
    added, contexts, messages = run.added, run.contexts, run.messages
    assert added["no_words"] == 0 and added["timeout"] == 0, added
    assert contexts == 1
    assert [m["content"] for m in messages if m.get("role") == "user"] == ["Hello world."], messages
