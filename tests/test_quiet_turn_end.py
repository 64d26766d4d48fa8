"""The minimum quiet before a segmented engine's turn ends (``vad.turn_min_quiet_secs``, agent/quiet_turn_stop.py).

Real components throughout: the agent's Silero VAD (``make_vad``), Moonshine tiny-en (with and without the Whisper
fallback), the agent's turn strategies (``make_turn_strategies``: smart-turn v3, speculation on finals), pipecat's
user aggregator and the agent's LLM stage on the embedded llama.cpp server. Recorded Asterisk prompts are played
in real time (20 ms frames), with 2 s of quiet after them. The recorded ``ss-noservice`` and ``pbx-invalid`` hold a
0.32 / 0.30 s pause between two sentences (last voiced to next voiced 10 ms frame, ``testkit.voiced``'s rule): a
fast final used to end the turn inside it, and the caller got two replies.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

import httpx
import numpy as np
import pytest
from pipecat.frames.frames import (
    Frame,
    InputAudioRawFrame,
    LLMContextFrame,
    LLMFullResponseStartFrame,
    LLMTextFrame,
    UserStoppedSpeakingFrame,
)
from pipecat.pipeline.pipeline import Pipeline
from pipecat.pipeline.worker import PipelineParams
from pipecat.processors.aggregators.llm_context import LLMContext
from pipecat.processors.aggregators.llm_response_universal import (
    LLMUserAggregatorParams,
)
from pipecat.processors.audio.vad_processor import VADProcessor
from pipecat.processors.frame_processor import FrameDirection, FrameProcessor
from pipecat.tests.utils import SleepFrame, run_test

from agent.capacity.corpus import ASTERISK_DIR
from agent.config import Config, LLMConfig
from agent.llm_server import ManagedLLMServer, embedded_llama_server
from agent.llm_stage import CadenceLLMService
from agent.models import moonshine_model_dir, whisper_model_dir
from agent.pipeline import make_turn_strategies, make_vad
from agent.speculative_turn import SpeculationStats
from agent.turn_observer import TurnObserver, TurnTiming
from agent.user_aggregator import CadenceAggregatorPair
from asr.moonshine.stt import create_moonshine_stt
from asr.moonshine.whisper_fallback import DEFAULT_BELOW
from testkit.corpus import normalize
from testkit.talk_clips import PAUSED, stretch_pause
from transports.audio_io import load_audio

pytest.importorskip("llama_cpp")
pytestmark = pytest.mark.skipif(not (ASTERISK_DIR / "ss-noservice.wav").is_file(),
                                reason="needs asterisk-core-sounds-en-wav (installed by scripts/install.sh)")

RATE, FRAME = 16000, 320  # 20 ms frames
MIN_QUIET = Config().vad.turn_min_quiet_secs
SENTENCES = {"ss-noservice": ("The number you have dialed is not in service.", "Please check the number and try again."),
             "pbx-invalid": ("I am sorry, that's not a valid extension.", "Please try again."),
             "vm-nomore": ("No more messages.",), "queue-thankyou": ("Thank you for your patience.",),
             "conf-onlyperson": ("You are currently the only person in this conference.",)}
PROMPT_TEXT = {"vm-whichbox": "To leave a message, please enter a mailbox number.",
               "vm-rec-temp": "After the tone, say your temporary message, and then press the pound key."}


@pytest.fixture(scope="module")
def server(tmp_path_factory) -> ManagedLLMServer:
    srv = embedded_llama_server(threads=2, log_path=tmp_path_factory.mktemp("llm") / "server.log")
    srv.env = dict(os.environ, PYTHONUNBUFFERED="1")
    with srv:
        httpx.post(f"{srv.base_url}/chat/completions", timeout=120, json={  # the first request pays one-off costs
            "model": srv.model_id, "max_tokens": 4, "messages": [{"role": "system", "content": LLMConfig().system_prompt},
                                                                 {"role": "user", "content": "Hello."}]})
        yield srv


def _voiced(audio: np.ndarray) -> np.ndarray:
    """testkit.voiced's rule per 10 ms frame: within 35 dB of the loudest and above 3e-4 RMS."""
    n = len(audio) // 160
    rms = np.sqrt(np.mean(audio[: n * 160].reshape(n, 160).astype(np.float64) ** 2, axis=1))
    return np.nonzero(rms > max(3e-4, float(rms.max()) * 10 ** (-35 / 20)))[0]


def _clip(names: list[str], pause_s: float | None) -> tuple[np.ndarray, float]:
    """0.5 s of quiet, the prompts (trimmed to their voiced frames and ``pause_s`` apart when given), 2 s of
    quiet; and where the last voiced sample is (s)."""
    parts = []
    for name in names:
        audio = load_audio(ASTERISK_DIR / f"{name}.wav", RATE)
        if pause_s is not None:
            voiced = _voiced(audio)
            audio = np.concatenate([audio[voiced[0] * 160 : (voiced[-1] + 1) * 160], np.zeros(int(pause_s * RATE))])
        parts.append(audio.astype(np.float32))
    speech = np.concatenate(parts)
    last_voiced = 0.5 + (_voiced(speech)[-1] + 1) / 100
    return np.concatenate([np.zeros(RATE // 2), speech, np.zeros(2 * RATE)]).astype(np.float32), last_voiced


class Tap(FrameProcessor):
    """After the user aggregator: the audio position (s) and wall time of each downstream frame."""

    def __init__(self) -> None:
        super().__init__()
        self.audio_s = 0.0
        self.seen: list[tuple[float, float, Frame]] = []

    async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
        await super().process_frame(frame, direction)
        if isinstance(frame, InputAudioRawFrame):
            self.audio_s += len(frame.audio) / 2 / RATE
        elif direction == FrameDirection.DOWNSTREAM:
            self.seen.append((self.audio_s, time.monotonic(), frame))
        await self.push_frame(frame, direction)

    def of(self, cls: type) -> list[tuple[float, float, Frame]]:
        return [s for s in self.seen if isinstance(s[2], cls)]


@dataclass
class Run:
    context: LLMContext
    turn: Tap  # after the user aggregator
    out: Tap  # after the LLM stage
    stats: SpeculationStats
    held_ends: int
    sent: list[float]  # when the LLM stage sent each chat request
    timings: list[TurnTiming]  # the agent's stage record of each turn
    held_for_unfinished_text: int = 0  # held ends that needed vad.turn_unfinished_quiet_secs


async def _run(server: ManagedLLMServer, audio: np.ndarray, min_quiet: float = MIN_QUIET,
               below: float | None = None, unfinished_quiet: float | None = None) -> Run:
    """``below``: Whisper transcribes again each segment Moonshine chose a token under this probability for
    (``asr.fallback_below``; 1.0: every segment); None: Moonshine alone."""
    config = Config()
    config.asr.engine, config.vad.turn_min_quiet_secs = "moonshine", min_quiet
    if unfinished_quiet is not None:
        config.vad.turn_unfinished_quiet_secs = unfinished_quiet
    if below is not None:
        config.asr.fallback, config.asr.fallback_below = "whisper", below
    stats = SpeculationStats()
    strategies = make_turn_strategies(config, stats)
    context = LLMContext()
    pair = CadenceAggregatorPair(context, user_params=LLMUserAggregatorParams(user_turn_strategies=strategies))
    sent: list[float] = []

    async def note(request: httpx.Request) -> None:
        sent.append(time.monotonic())

    http = httpx.AsyncClient(event_hooks={"request": [note]})
    llm = CadenceLLMService(LLMConfig(temperature=0.0, max_tokens=24, request_timeout_s=120.0), server.base_url,
                            server.model_id, http_client=http)
    stt = create_moonshine_stt(config.asr, str(moonshine_model_dir()),
                               str(whisper_model_dir()) if below is not None else None)
    turn, out, observer = Tap(), Tap(), TurnObserver()
    pcm = (np.clip(audio, -1, 1) * 32767).astype(np.int16)
    frames: list[Frame] = []
    for lo in range(0, len(pcm), FRAME):
        frames += [InputAudioRawFrame(audio=pcm[lo : lo + FRAME].tobytes(), sample_rate=RATE, num_channels=1),
                   SleepFrame(sleep=FRAME / RATE)]
    pipeline = Pipeline([VADProcessor(vad_analyzer=make_vad(config)), stt, pair.user(), turn, llm, out,
                         pair.assistant()])
    try:
        await run_test(pipeline, frames_to_send=frames, pipeline_params=PipelineParams(audio_in_sample_rate=RATE),
                       observers=[observer])
    finally:
        await http.aclose()
    return Run(context, turn, out, stats, strategies.stop[0].held_ends, sent, observer.turns,
               strategies.stop[0].held_for_unfinished_text)


def _messages(context: LLMContext) -> list[tuple[str, str]]:
    return [(m["role"], m["content"]) for m in context.messages if m["role"] in ("user", "assistant")]


def _heard(sentence: str, text: str) -> float:
    """The share of the sentence's words in the text (Moonshine may get one wrong)."""
    words, said = normalize(sentence).split(), set(normalize(text).split())
    return sum(w in said for w in words) / len(words)


def _no_negative_stage(run: Run) -> None:
    stages = [t.stages_ms() for t in run.timings]
    assert stages and all(v >= 0 for s in stages for v in s.values()), stages


@pytest.mark.parametrize(("names", "pause_s", "below"), [
    (["ss-noservice"], None, None), (["pbx-invalid"], None, None), (["ss-noservice"], None, DEFAULT_BELOW),
    (["pbx-invalid"], None, DEFAULT_BELOW), (["ss-noservice"], None, 1.0), (["vm-nomore", "queue-thankyou"], 0.3, None)])
async def test_two_sentences_a_short_pause_apart_get_one_reply_to_both(server, names, pause_s, below):
    """Moonshine alone, with the Whisper fallback as configured, and with Whisper redoing every segment."""
    audio, _ = _clip(names, pause_s)
    run = await _run(server, audio, below=below)
    replies = run.out.of(LLMFullResponseStartFrame)
    messages = _messages(run.context)
    print(f"{'+'.join(names)} below={below}: {run.stats.snapshot()}, held {run.held_ends}, {messages}")
    assert len(replies) == 1 and [r for r, _ in messages] == ["user", "assistant"], messages
    # the one reply answers both sentences: the request that made it carried them (the turn's one user message)
    sentences = [s for n in names for s in SENTENCES[n]]
    assert all(_heard(s, messages[0][1]) >= 0.7 for s in sentences), (sentences, messages[0][1])
    assert run.stats.confirmed + len(run.sent) - run.stats.total_started == 1  # one reply, by either path
    _no_negative_stage(run)


@pytest.mark.parametrize(("names", "pause_s"), [(["ss-noservice"], None), (["vm-nomore", "queue-thankyou"], 0.3)])
async def test_without_the_minimum_quiet_the_pause_ends_the_turn(server, names, pause_s):
    """The precondition of the test above: the same pause ends the turn when nothing holds it."""
    audio, _ = _clip(names, pause_s)
    run = await _run(server, audio, min_quiet=0.0)
    assert len(run.out.of(LLMFullResponseStartFrame)) == 2 and run.held_ends == 0


async def test_a_single_sentence_is_requested_before_its_turn_ends(server):
    audio, last_voiced = _clip(["conf-onlyperson"], None)
    run = await _run(server, audio)
    (end_audio, end_at, _), = run.turn.of(UserStoppedSpeakingFrame)
    speculative = [at for _, at, f in run.turn.of(LLMContextFrame) if f.speculation]
    first_token = run.out.of(LLMTextFrame)[0][1]
    print(f"turn end {end_audio - last_voiced:.3f} s of audio after the last voiced sample; request "
          f"{end_at - run.sent[0]:.3f} s before it, first token {first_token - end_at:+.3f} s after it")
    assert run.stats.snapshot() == {"started": {"final": 1}, "confirmed": 1, "withdrawn": {}, "wasted": 0}
    assert len(run.sent) == 1 and speculative and speculative[0] < end_at and run.sent[0] < end_at
    assert run.held_ends == 1 and len(run.out.of(LLMFullResponseStartFrame)) == 1
    # quiet counted from the last voiced 20 ms frame: released on the frame that completes it (the margin above:
    # smart-turn's verdict on shared cores may come later than that)
    assert MIN_QUIET - 0.03 <= end_audio - last_voiced <= MIN_QUIET + 0.15, end_audio - last_voiced
    assert first_token >= end_at  # nothing of the reply before the turn end
    _no_negative_stage(run)


async def test_a_click_in_the_quiet_delays_the_turn_end_boundedly(server):
    """40 ms of loud noise 0.35 s into the quiet: too short for a VAD start, so only the level saw it. The end
    waits until the VAD has counted min_quiet + ONSET_GUARD_S of quiet, not for another min_quiet after it."""
    audio, last_voiced = _clip(["conf-onlyperson"], None)
    at = int((last_voiced + 0.35) * RATE)
    audio[at : at + int(0.04 * RATE)] = np.random.default_rng(3).normal(0, 0.1, int(0.04 * RATE))
    run = await _run(server, audio)
    (end_audio, _, _), = run.turn.of(UserStoppedSpeakingFrame)
    assert len(run.out.of(LLMFullResponseStartFrame)) == 1 and run.stats.confirmed == 1
    print(f"turn end {end_audio - last_voiced:.3f} s after the last voiced sample")
    assert 0.39 + MIN_QUIET > end_audio - last_voiced >= 0.5, end_audio - last_voiced


def _paused_clip(name: str, at_s: float) -> np.ndarray:
    """A recorded sentence whose pause after an unfinished clause is stretched to 0.6 s (testkit.talk_clips)."""
    audio = stretch_pause(load_audio(ASTERISK_DIR / f"{name}.wav", RATE), at_s, RATE)
    return np.concatenate([np.zeros(RATE // 2), audio, np.zeros(2 * RATE)]).astype(np.float32)


@pytest.mark.parametrize(("name", "at_s"), PAUSED)
async def test_a_pause_after_an_unfinished_clause_does_not_end_the_turn(server, name, at_s):
    """"To leave a message, | please enter a mailbox number.": Moonshine writes "To leave a message." for the
    first part and smart-turn calls it complete; the hanging clause holds the end for the longer quiet."""
    run = await _run(server, _paused_clip(name, at_s))
    messages = _messages(run.context)
    print(f"{name}: {run.stats.snapshot()}, held {run.held_ends} ({run.held_for_unfinished_text} on the text), "
          f"{messages}")
    assert len(run.out.of(LLMFullResponseStartFrame)) == 1 and [r for r, _ in messages] == ["user", "assistant"]
    assert _heard(PROMPT_TEXT[name], messages[0][1]) >= 0.8, messages
    assert run.held_for_unfinished_text >= 1
    _no_negative_stage(run)


async def test_without_the_unfinished_rule_the_clause_pause_ends_the_turn(server):
    """The precondition of the test above: with the plain minimum quiet the caller gets two replies."""
    run = await _run(server, _paused_clip(*PAUSED[0]), unfinished_quiet=0.0)
    assert len(run.out.of(LLMFullResponseStartFrame)) == 2 and run.held_for_unfinished_text == 0
