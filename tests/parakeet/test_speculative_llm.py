"""Speculative LLM requests on Parakeet partials, against a real llama.cpp server (agent/speculative_turn.py).

The pipeline is the agent's middle: the streaming Parakeet STT (tiny model) -> the user aggregator with a
speculative stop strategy (plain silence end of turn, so the timing is deterministic) -> the agent's LLM
stage on the embedded llama.cpp server -> the assistant aggregator. The server's own log says how many
chat requests it served and which ones the client closed early.
"""

from __future__ import annotations

import asyncio
import os
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
import numpy as np
import pytest
from pipecat.frames.frames import (
    Frame,
    InputAudioRawFrame,
    InterimTranscriptionFrame,
    LLMContextFrame,
    LLMFullResponseStartFrame,
    LLMTextFrame,
    TranscriptionFrame,
    TTSSpeakFrame,
    UserStoppedSpeakingFrame,
    VADUserStartedSpeakingFrame,
    VADUserStoppedSpeakingFrame,
)
from pipecat.pipeline.pipeline import Pipeline
from pipecat.pipeline.worker import PipelineParams
from pipecat.processors.aggregators.llm_context import LLMContext
from pipecat.processors.aggregators.llm_response_universal import LLMUserAggregatorParams
from pipecat.processors.frame_processor import FrameDirection, FrameProcessor
from pipecat.tests.utils import SleepFrame, run_test
from pipecat.turns.types import UserTurnSpeculation
from pipecat.turns.user_start import VADUserTurnStartStrategy
from pipecat.turns.user_stop import SpeechTimeoutUserTurnStopStrategy
from pipecat.turns.user_turn_strategies import UserTurnStrategies
from pipecat.utils.time import time_now_iso8601

from agent.capacity.phone_ramp import server_counts
from agent.config import LLMConfig
from agent.llm_server import ManagedLLMServer, embedded_llama_server
from agent.llm_stage import CadenceLLMService
from agent.metrics.prometheus import CadenceCollector, make_registry, render
from agent.metrics.stages import StageMetrics
from agent.speculative_turn import (
    SpeculationPolicy,
    SpeculationStats,
    SpeculativeSpeechTimeoutStopStrategy,
    parse_triggers,
)
from agent.user_aggregator import CadenceAggregatorPair
from agent.withdrawn_speculation import attach, is_withdrawn, mark_withdrawn, speculation_of
from asr.parakeet.batcher import StreamBatcher
from asr.parakeet.engine import ParakeetEngine
from asr.parakeet.streaming import StreamConfig, StreamResult
from asr.parakeet.stt_service import ParakeetPartial, ParakeetSTTService
from asr.parakeet.tiny import synthetic_speech
from asr.pause import CallerPauseFrame

pytest.importorskip("llama_cpp")

TURN_WAIT_S = 0.8  # silence after the VAD stop before the turn ends
# A reply long enough to be still streaming when a speculation is withdrawn, so the server sees the close.
# Timeouts generous: the cores are shared, and these tests are about which requests, not how fast.
LONG = LLMConfig(temperature=0.0, max_tokens=40, request_timeout_s=120.0, system_prompt=(
    "You are a patient storyteller. Whatever the user says, answer with a long story of at least ten sentences."))


@pytest.fixture(scope="module")
def batcher(tiny_dir) -> StreamBatcher:
    return StreamBatcher(ParakeetEngine.from_pretrained(tiny_dir), StreamConfig(chunk_ms=160))


@pytest.fixture(scope="module")
def server(tmp_path_factory) -> ManagedLLMServer:
    log = tmp_path_factory.mktemp("llm") / "server.log"
    srv = embedded_llama_server(threads=2, log_path=log)
    srv.env = dict(os.environ, PYTHONUNBUFFERED="1")  # the log is read while the server runs
    with srv:
        for system in (LLMConfig().system_prompt, LONG.system_prompt):  # first requests pay one-off costs
            httpx.post(f"{srv.base_url}/chat/completions", timeout=120, json={
                "model": srv.model_id, "max_tokens": 4, "messages": [{"role": "system", "content": system},
                                                                     {"role": "user", "content": "Hello."}]})
        yield srv


class ServerLog:
    """Chat requests the server answered and streams it saw the client close, since ``mark()``."""

    def __init__(self, server: ManagedLLMServer) -> None:
        assert server.log_path is not None
        self.path: Path = server.log_path
        self._start = 0

    def mark(self) -> None:
        self._start = len(self.path.read_text(errors="replace"))

    def _new(self) -> str:
        return self.path.read_text(errors="replace")[self._start :]

    @property
    def requests(self) -> int:
        return self._new().count('"POST /v1/chat/completions HTTP/1.1" 200')

    @property
    def closed_by_client(self) -> int:
        return self._new().count("Disconnected from client (via refresh/close)")


class Stamped(FrameProcessor):
    """Passes frames on, noting when each downstream frame got here."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[tuple[float, Frame]] = []

    async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
        await super().process_frame(frame, direction)
        if direction == FrameDirection.DOWNSTREAM:
            self.seen.append((time.monotonic(), frame))
        await self.push_frame(frame, direction)

    def first(self, cls: type, after: float = 0.0) -> float | None:
        return next((t for t, f in self.seen if isinstance(f, cls) and t >= after), None)

    def frames(self, cls: type) -> list:
        return [f for _, f in self.seen if isinstance(f, cls)]


@dataclass
class TurnRun:
    context: LLMContext
    taps: Stamped  # between the STT and the user aggregator
    out: Stamped  # after the LLM stage
    stats: SpeculationStats
    requests_sent: list[float]  # when the LLM stage sent each chat request
    mid: Stamped | None = None  # between the user aggregator and the LLM stage


def _speech(clip: np.ndarray, pace_s: float = 0.004) -> list[Frame]:
    pcm = (np.clip(clip, -1, 1) * 32767).astype(np.int16)
    frames: list[Frame] = []
    for lo in range(0, len(pcm), 320):
        frames += [InputAudioRawFrame(audio=pcm[lo : lo + 320].tobytes(), sample_rate=16000, num_channels=1),
                   SleepFrame(sleep=pace_s)]
    return frames


def _utterance(clip: np.ndarray) -> list[Frame]:
    return [VADUserStartedSpeakingFrame(start_secs=0.1), *_speech(clip), VADUserStoppedSpeakingFrame(stop_secs=0.2)]


async def _run(batcher: StreamBatcher, server: ManagedLLMServer, frames: list[Frame], speculate: str,
               llm_config: LLMConfig | None = None, turn_wait_s: float = TURN_WAIT_S) -> TurnRun:
    stats = SpeculationStats()
    triggers = parse_triggers(speculate)
    if triggers:
        stop = SpeculativeSpeechTimeoutStopStrategy(user_speech_timeout=turn_wait_s,
                                                    policy=SpeculationPolicy(triggers), stats=stats)
    else:
        stop = SpeechTimeoutUserTurnStopStrategy(user_speech_timeout=turn_wait_s)
    context = LLMContext()
    user, assistant = CadenceAggregatorPair(context, user_params=LLMUserAggregatorParams(
        user_turn_strategies=UserTurnStrategies(start=[VADUserTurnStartStrategy()], stop=[stop])))
    llm_config = llm_config or LLMConfig(temperature=0.0, max_tokens=24, request_timeout_s=120.0)
    sent: list[float] = []

    async def note(request: httpx.Request) -> None:
        if request.url.path.endswith("/chat/completions"):
            sent.append(time.monotonic())

    http = httpx.AsyncClient(event_hooks={"request": [note]})
    llm = CadenceLLMService(llm_config, server.base_url, server.model_id, http_client=http)
    taps, out = Stamped(), Stamped()
    stt = ParakeetSTTService(batcher, preroll_s=0.0, audio_passthrough=False)
    pipeline = Pipeline([stt, taps, user, llm, out, assistant])
    try:
        await run_test(pipeline, frames_to_send=frames, pipeline_params=PipelineParams(audio_in_sample_rate=16000))
    finally:
        await http.aclose()
    return TurnRun(context, taps, out, stats, sent)


def _turns(context: LLMContext) -> list[tuple[str, str]]:
    return [(m["role"], m["content"]) for m in context.messages if m["role"] in ("user", "assistant")]


async def test_a_hit_uses_the_speculative_stream_made_before_the_turn_ended(batcher, server):
    log = ServerLog(server)
    clip = synthetic_speech(1.6, seed=21)
    log.mark()
    on = await _run(batcher, server, [*_utterance(clip), SleepFrame(sleep=TURN_WAIT_S + 2.5)], "final")

    final = " ".join(f.text for f in on.taps.frames(TranscriptionFrame))
    assert final, "the tiny model says nothing for this clip: pick one it transcribes"
    assert on.stats.snapshot() == {"started": {"final": 1}, "confirmed": 1, "withdrawn": {}, "wasted": 0}
    assert log.requests == 1 and log.closed_by_client == 0  # one request: the speculative one was used
    # one turn in the context, with the final transcript and the (released) reply
    assert [r for r, _ in _turns(on.context)] == ["user", "assistant"]
    assert _turns(on.context)[0][1] == final and _turns(on.context)[1][1].strip()
    assert len(on.out.frames(LLMFullResponseStartFrame)) == 1
    # the one request went out at the final, TURN_WAIT_S before the turn ended (without speculation it goes
    # out at the turn end): the first token is that much earlier, up to the time to first token
    # (bench/speculative_llm.py measures it; on these shared cores a timing assertion would be noise)
    turn_end = on.out.first(UserStoppedSpeakingFrame)
    assert len(on.requests_sent) == 1 and on.requests_sent[0] < turn_end - TURN_WAIT_S / 2
    assert on.out.first(LLMTextFrame) >= turn_end
    # nothing of the reply went out before the turn ended
    assert on.out.first(LLMFullResponseStartFrame) >= on.out.first(UserStoppedSpeakingFrame)


async def test_a_miss_cancels_the_speculative_request_and_answers_the_final_transcript(batcher, server):
    """``pause``: speculate at the VAD stop on the newest partial, which lags the audio; the final differs."""
    log = ServerLog(server)
    clip = synthetic_speech(2.0, seed=24)
    log.mark()
    run = await _run(batcher, server, [*_utterance(clip), SleepFrame(sleep=4.0)], "pause", LONG, turn_wait_s=0.3)
    partials = [f.text for f in run.taps.frames(InterimTranscriptionFrame)]
    final = " ".join(f.text for f in run.taps.frames(TranscriptionFrame))
    assert partials and final and partials[-1] != final, "premise: the last partial is not the final"
    assert run.stats.started == {"pause": 1} and run.stats.confirmed == 0
    assert run.stats.withdrawn == {"final_differs": 1}
    assert len(run.requests_sent) == 2  # the speculative one and the turn's own
    # The server completed only the turn's own: the client closed the speculative one (the final came
    # ~50 ms after it) before the server answered it (no access-log line, no tokens) or while it streamed
    # (a disconnect line; the resumed-caller test below always takes that path).
    assert log.requests - log.closed_by_client == 1, (log.requests, log.closed_by_client)
    assert _turns(run.context) == [("user", final), ("assistant", _turns(run.context)[1][1])]
    reply = _turns(run.context)[1][1]
    assert len(run.out.frames(LLMFullResponseStartFrame)) == 1  # the withdrawn reply never went out
    assert reply == "".join(f.text for f in run.out.frames(LLMTextFrame))
    # the reply answers the final transcript: the same request, made directly, gives the same text
    direct = httpx.post(f"{server.base_url}/chat/completions", timeout=60, json={
        "model": server.model_id, "max_tokens": LONG.max_tokens, "temperature": 0.0,
        "messages": [{"role": "system", "content": LONG.system_prompt}, {"role": "user", "content": final}],
    }).json()["choices"][0]["message"]["content"]
    assert reply.strip() == direct.strip()


async def test_a_caller_who_resumes_cancels_the_speculation_and_no_turn_is_lost_or_doubled(batcher, server):
    log = ServerLog(server)
    first, second = synthetic_speech(1.6, seed=21), synthetic_speech(1.2, seed=22)
    frames = [*_utterance(first), SleepFrame(sleep=0.3),  # the final is in, the turn is still open
              *_utterance(second), SleepFrame(sleep=TURN_WAIT_S + 3.0)]
    log.mark()
    run = await _run(batcher, server, frames, "final", LONG)
    finals = [f.text for f in run.taps.frames(TranscriptionFrame)]
    assert len(finals) == 2 and all(finals)
    assert run.stats.withdrawn == {"resumed": 1} and run.stats.confirmed == 1
    assert run.stats.started == {"final": 2}
    assert len(run.requests_sent) == 2
    assert log.requests == 2 and log.closed_by_client == 1  # the server saw the speculative stream closed
    turns = _turns(run.context)
    assert [r for r, _ in turns] == ["user", "assistant"] and turns[0][1] == " ".join(finals)
    assert len(run.out.frames(LLMFullResponseStartFrame)) == 1


def _partial(text: str, repeats: int, audio_s: float, at_pause: bool = False) -> InterimTranscriptionFrame:
    result = ParakeetPartial(StreamResult(1, False, text, [], [], [], audio_s), repeats, repeats >= 2, at_pause)
    return InterimTranscriptionFrame(text, "caller", time_now_iso8601(), result=result)


def _final(text: str) -> TranscriptionFrame:
    frame = TranscriptionFrame(text, "caller", time_now_iso8601())
    frame.finalized = True
    return frame


class SlowHop(Stamped):
    """A busy hop: each request (data frame) waits here ``delay_s`` while system frames pass at once, as they
    do in pipecat when a call's loop is loaded."""

    def __init__(self, delay_s: float) -> None:
        super().__init__()
        self.delay_s = delay_s

    async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
        if isinstance(frame, LLMContextFrame):
            await asyncio.sleep(self.delay_s)
        await super().process_frame(frame, direction)


async def _run_text(server: ManagedLLMServer, frames: list[Frame], speculate: str, hop_delay_s: float = 0.0
                    ) -> TurnRun:
    """The aggregator and LLM stage fed transcript frames as ParakeetSTTService pushes them (the tiny random
    model's text changes with every partial, even over silence, so it never produces a stable one)."""
    stats = SpeculationStats()
    stop = SpeculativeSpeechTimeoutStopStrategy(user_speech_timeout=TURN_WAIT_S,
                                                policy=SpeculationPolicy(parse_triggers(speculate)), stats=stats)
    context = LLMContext()
    user, assistant = CadenceAggregatorPair(context, user_params=LLMUserAggregatorParams(
        user_turn_strategies=UserTurnStrategies(start=[VADUserTurnStartStrategy()], stop=[stop])))
    sent: list[float] = []

    async def note(request: httpx.Request) -> None:
        sent.append(time.monotonic())

    http = httpx.AsyncClient(event_hooks={"request": [note]})
    llm = CadenceLLMService(LONG, server.base_url, server.model_id, http_client=http)
    taps, mid, out = Stamped(), SlowHop(hop_delay_s), Stamped()
    try:
        await run_test(Pipeline([taps, user, mid, llm, out, assistant]), frames_to_send=frames)
    finally:
        await http.aclose()
    return TurnRun(context, taps, out, stats, sent, mid)


def _assert_one_confirmed(run: TurnRun, trigger: str) -> None:
    """One speculation (``trigger``), confirmed: one request, sent before the VAD stop; one turn, one reply."""
    assert run.stats.snapshot() == {"started": {trigger: 1}, "confirmed": 1, "withdrawn": {}, "wasted": 0}
    assert len(run.requests_sent) == 1 and run.requests_sent[0] < run.taps.first(VADUserStoppedSpeakingFrame)
    turns = _turns(run.context)
    assert turns[0] == ("user", "What time is it?") and [r for r, _ in turns] == ["user", "assistant"]


async def test_a_stable_partial_starts_the_reply_while_the_caller_is_still_talking(server):
    frames = [VADUserStartedSpeakingFrame(start_secs=0.1), _partial("what time is it", 1, 0.64),
              _partial("what time is it", 2, 1.28), SleepFrame(sleep=0.4),
              VADUserStoppedSpeakingFrame(stop_secs=0.2), _final("What time is it?"), SleepFrame(sleep=TURN_WAIT_S + 2)]
    run = await _run_text(server, frames, "stable")
    _assert_one_confirmed(run, "stable")


async def test_a_stable_partial_the_caller_talks_past_is_withdrawn(server):
    log = ServerLog(server)
    log.mark()
    frames = [VADUserStartedSpeakingFrame(start_secs=0.1), _partial("what time", 1, 0.64),
              _partial("what time", 2, 1.28), SleepFrame(sleep=0.5), _partial("what time is it", 1, 1.92),
              VADUserStoppedSpeakingFrame(stop_secs=0.2), _final("What time is it?"), SleepFrame(sleep=TURN_WAIT_S + 2)]
    run = await _run_text(server, frames, "stable")
    assert run.stats.started == {"stable": 1} and run.stats.withdrawn == {"newer_partial": 1}
    assert run.stats.confirmed == 0 and len(run.requests_sent) == 2
    # What the server saw depends on where the withdrawal landed: a short speculative reply can be complete
    # before the caller's newer partial (idle cores: 2 answered, 0 closed), or still streaming (a disconnect
    # line). Either way it is at most one closed stream, and nothing of it went out (below); the
    # resumed-caller test asserts the disconnect of a live stream.
    assert log.closed_by_client <= 1 and log.requests - log.closed_by_client >= 1, (log.requests, log.closed_by_client)
    assert _turns(run.context)[0] == ("user", "What time is it?") and len(_turns(run.context)) == 2
    assert len(run.out.frames(LLMFullResponseStartFrame)) == 1


async def test_the_partial_at_the_pause_starts_the_reply_before_the_vad_stop(server):
    """``quiet``: the reply is asked for on the partial Parakeet made at the start of the VAD's stop window, not on
    a partial the cadence made before it; the turn end confirms it."""
    frames = [VADUserStartedSpeakingFrame(start_secs=0.1), _partial("what time is", 1, 0.64),
              CallerPauseFrame(quiet=True), _partial("what time is", 2, 0.96), SleepFrame(sleep=0.1),
              _partial("what time is it", 1, 1.12, at_pause=True), SleepFrame(sleep=0.2),
              VADUserStoppedSpeakingFrame(stop_secs=0.2), _final("What time is it?"), SleepFrame(sleep=TURN_WAIT_S + 2)]
    run = await _run_text(server, frames, "final,quiet")
    _assert_one_confirmed(run, "quiet")
    assert len(run.out.frames(LLMFullResponseStartFrame)) == 1


async def test_a_caller_who_speaks_again_inside_the_stop_window_withdraws_the_quiet_speculation(server):
    frames = [VADUserStartedSpeakingFrame(start_secs=0.1), CallerPauseFrame(quiet=True),
              _partial("what time", 1, 0.8, at_pause=True), SleepFrame(sleep=0.3), CallerPauseFrame(quiet=False),
              _partial("what time is it", 1, 1.44), VADUserStoppedSpeakingFrame(stop_secs=0.2),
              _final("What time is it?"), SleepFrame(sleep=TURN_WAIT_S + 2)]
    run = await _run_text(server, frames, "quiet")
    assert run.stats.started == {"quiet": 1} and run.stats.withdrawn == {"resumed": 1}
    assert run.stats.confirmed == 0 and len(run.requests_sent) == 2  # the withdrawn one and the turn's own
    assert _turns(run.context)[0] == ("user", "What time is it?") and len(_turns(run.context)) == 2
    assert len(run.out.frames(LLMFullResponseStartFrame)) == 1
    # the speculative request names the speculation it answers, so the LLM stage sees it withdrawn (pipecat's own
    # frame says only speculation=True); the turn's own request names none
    assert run.mid is not None
    speculative, own = run.mid.frames(LLMContextFrame)
    assert speculative.speculation is True and speculation_of(speculative).text == "what time"
    assert is_withdrawn(speculation_of(speculative))
    assert not own.speculation and speculation_of(own) is None


async def test_a_speculation_withdrawn_while_its_request_waited_at_the_llm_stage_never_runs(server):
    """The withdrawal (a system frame) can overtake the speculative context frame still queued at the LLM stage, where
    pipecat's service, not yet speculating, ignores it: the request would then run as an orphan reply that the audio
    gate releases after the turn (run 78: two turns answered twice). The strategy marks what it withdraws and the
    LLM stage drops a marked context frame; an unmarked one is answered."""
    sent: list[float] = []

    async def note(request: httpx.Request) -> None:
        sent.append(time.monotonic())

    http = httpx.AsyncClient(event_hooks={"request": [note]})
    llm = CadenceLLMService(LONG, server.base_url, server.model_id, http_client=http)
    out = Stamped()
    withdrawn = UserTurnSpeculation(text="what time is it")
    mark_withdrawn(withdrawn)
    context = LLMContext(messages=[{"role": "user", "content": "What time is it?"}])
    speculative = LLMContextFrame(context=context, speculation=True)  # as pipecat's user aggregator pushes it...
    attach(speculative, withdrawn)  # ...and CadenceUserAggregator names its speculation
    try:
        await run_test(Pipeline([llm, out]), frames_to_send=[
            speculative, SleepFrame(sleep=1.0), LLMContextFrame(context=context), SleepFrame(sleep=3.0)])
    finally:
        await http.aclose()
    assert len(sent) == 1 and llm.withdrawn_unstarted == 1  # only the unmarked request went to the server
    assert len(out.frames(LLMFullResponseStartFrame)) == 1


async def test_a_reply_whose_speculation_is_withdrawn_while_it_streams_is_dropped_from_there(server):
    """pipecat's service stops a speculative request on its cancel only if it was already speculating when the cancel
    came; a reply the cancel missed streamed on, and the caller heard it after the turn's own. The LLM stage drops
    the rest of a reply whose speculation is marked withdrawn, whatever pipecat's state."""
    speculation = UserTurnSpeculation(text="what time is it")
    sent: list[float] = []

    async def note(request: httpx.Request) -> None:
        if not sent:  # the first request is on its way: withdraw it (no cancel frame: the one that was missed)
            mark_withdrawn(speculation)
        sent.append(time.monotonic())

    http = httpx.AsyncClient(event_hooks={"request": [note]})
    llm = CadenceLLMService(LONG, server.base_url, server.model_id, http_client=http)
    out = Stamped()
    context = LLMContext(messages=[{"role": "user", "content": "What time is it?"}])
    speculative = LLMContextFrame(context=context, speculation=True)
    attach(speculative, speculation)
    try:
        await run_test(Pipeline([llm, out]), frames_to_send=[
            speculative, SleepFrame(sleep=4.0), LLMContextFrame(context=context), SleepFrame(sleep=4.0)])
    finally:
        await http.aclose()
    assert llm.withdrawn_late == 1 and llm.withdrawn_unstarted == 0
    # its dropped text is not an empty reply: no retry, and no "empty reply" phrase in its place
    assert len(sent) == 2 and llm.empty_count == 0 and not out.frames(TTSSpeakFrame)
    # /metrics says so, and the capacity tool reads it per level
    page = render(make_registry(CadenceCollector(StageMetrics()))).decode()
    assert server_counts(page)["dropped_withdrawn_late"] >= 1
    starts = [t for t, f in out.seen if isinstance(f, LLMFullResponseStartFrame)]
    texts = [t for t, f in out.seen if isinstance(f, LLMTextFrame) and f.text.strip()]
    # every word heard is the turn's own reply: none of the withdrawn one got past the stage
    assert texts and len(starts) in (1, 2) and min(texts) > starts[-1], (starts, texts[:3])


async def test_a_quiet_speculation_withdrawn_right_after_its_request_is_not_answered_too(server):
    """The caller speaks again just as the quiet speculation goes out: its withdrawal (a system frame) overtakes the
    request at the LLM stage, where pipecat ignores a cancel while not yet speculating. The turn gets one reply."""
    frames = [VADUserStartedSpeakingFrame(start_secs=0.1), CallerPauseFrame(quiet=True),
              _partial("what time", 1, 0.8, at_pause=True), SleepFrame(sleep=0.05), CallerPauseFrame(quiet=False),
              _partial("what time is it", 1, 1.44), VADUserStoppedSpeakingFrame(stop_secs=0.2),
              _final("What time is it?"), SleepFrame(sleep=TURN_WAIT_S + 3)]
    run = await _run_text(server, frames, "quiet", hop_delay_s=0.3)
    assert run.stats.started == {"quiet": 1} and run.stats.withdrawn == {"resumed": 1}
    starts = run.out.frames(LLMFullResponseStartFrame)
    assert len(starts) == 1, f"{len(starts)} replies to one turn"
    assert len(run.requests_sent) == 1  # the withdrawn request never went out
    assert _turns(run.context)[0] == ("user", "What time is it?") and len(_turns(run.context)) == 2

