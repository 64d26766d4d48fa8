"""A speculative reply synthesized during the turn end's wait, its audio held until the turn ends (``llm.speculate_tts``).

Real components: the agent's LLM stage on the embedded llama.cpp server (``hold_after_tts``: the speculative reply
goes on to the TTS, marked), the agent's TTS stage on the real Piper voice (``withdraw_on_cancel``), the
``SpeculativeAudioGate``, pipecat's assistant aggregator and the agent's ``TurnObserver``. The caller's side is
scripted with the frames the user aggregator pushes (turn start and end, the speculative and the real inference,
a withdrawal), and every step waits for the frame it depends on, never for a time: the reply is held after the TTS
made all of it, a withdrawal lands while the TTS is inside its first synthesis.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from pipecat.frames.frames import (
    EagerEndOfTurnCancelFrame,
    Frame,
    LLMContextFrame,
    LLMFullResponseEndFrame,
    LLMFullResponseStartFrame,
    LLMTextFrame,
    SystemFrame,
    TranscriptionFrame,
    TTSAudioRawFrame,
    TTSStartedFrame,
    UserStartedSpeakingFrame,
    UserStoppedSpeakingFrame,
    VADUserStoppedSpeakingFrame,
)
from pipecat.pipeline.pipeline import Pipeline
from pipecat.pipeline.worker import PipelineParams, PipelineWorker
from pipecat.processors.aggregators.llm_context import LLMContext
from pipecat.processors.aggregators.llm_response_universal import LLMAssistantAggregator
from pipecat.processors.frame_processor import FrameDirection, FrameProcessor
from pipecat.workers.runner import WorkerRunner

from agent.config import LLMConfig
from agent.held_reply import HeldReplyFrame, UnheldSpeculationGate, is_held_reply
from agent.llm_server import ManagedLLMServer, embedded_llama_server
from agent.llm_stage import CadenceLLMService
from agent.models import piper_voice
from agent.speculative_audio_gate import SpeculativeAudioGate
from agent.turn_observer import TurnObserver
from testkit.corpus import normalize
from tts.engines import PiperEngine
from tts.service import CadenceTTSService

pytest.importorskip("llama_cpp")
pytest.importorskip("piper")

WAIT_S = 120.0  # a hang guard only: every wait is for a frame or an event
QUESTION = "What is the capital of France?"


@pytest.fixture(scope="module")
def server() -> Iterator[ManagedLLMServer]:
    with embedded_llama_server(threads=2) as srv:
        yield srv


@pytest.fixture(scope="module")
def piper() -> PiperEngine:
    return PiperEngine(piper_voice())


class Piper:
    """The real Piper voice; with ``hold_first`` its first synthesis waits, inside the worker thread, for ``go``."""

    name = "piper"

    def __init__(self, engine: PiperEngine, hold_first: bool = False) -> None:
        self._engine, self._hold_first = engine, hold_first
        self.sample_rate = engine.sample_rate
        self.texts: list[str] = []  # each synthesis started, in order
        self.inside_first = threading.Event()
        self.go = threading.Event()

    def synthesize(self, text: str) -> Iterator[bytes]:
        self.texts.append(text)
        if self._hold_first and len(self.texts) == 1:
            self.inside_first.set()
            self.go.wait(WAIT_S)
        yield from self._engine.synthesize(text)


class Tap(FrameProcessor):
    """Records the downstream frames that pass it, in order."""

    def __init__(self, name: str) -> None:
        super().__init__(name=name)
        self.frames: list[Frame] = []

    async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
        await super().process_frame(frame, direction)
        if direction == FrameDirection.DOWNSTREAM:
            self.frames.append(frame)
        await self.push_frame(frame, direction)

    def of(self, cls: type) -> list[Any]:
        return [f for f in self.frames if isinstance(f, cls)]

    async def until(self, found: Callable[[Frame], bool]) -> Frame:
        async def poll() -> Frame:
            while not (hits := [f for f in self.frames if found(f)]):
                await asyncio.sleep(0.01)
            return hits[0]

        return await asyncio.wait_for(poll(), WAIT_S)


class Call:
    """LLM -> [text tap] -> TTS -> [before] -> gate -> [after] -> assistant aggregator, with a TurnObserver."""

    def __init__(self, server: ManagedLLMServer, engine: Piper) -> None:
        self.llm = CadenceLLMService(LLMConfig(temperature=0.0, max_tokens=24, request_timeout_s=120.0),
                                     server.base_url, server.model_id, hold_after_tts=True)
        self.tts = CadenceTTSService(engine, withdraw_on_cancel=True)
        self.gate = SpeculativeAudioGate()
        self.text, self.before, self.after = Tap("text"), Tap("before"), Tap("after")
        self.context = LLMContext()
        self.observer = TurnObserver()
        pipeline = Pipeline([self.llm, self.text, self.tts, self.before, self.gate, self.after,
                             LLMAssistantAggregator(self.context)])
        self.worker = PipelineWorker(pipeline, params=PipelineParams(audio_out_sample_rate=engine.sample_rate),
                                     observers=[self.observer], enable_rtvi=False, idle_timeout_secs=None)

    async def __aenter__(self) -> Call:
        started = asyncio.Event()

        @self.worker.event_handler("on_pipeline_started")
        async def _started(_worker: Any, _frame: Frame) -> None:
            started.set()

        self._runner = WorkerRunner(handle_sigint=False, check_dangling_tasks=False)
        await self._runner.add_workers(self.worker)
        self._run = asyncio.ensure_future(self._runner.run())
        await asyncio.wait_for(started.wait(), WAIT_S)
        return self

    async def __aexit__(self, *_exc: object) -> None:
        await self.worker.cancel()
        await asyncio.wait_for(self._run, 10)

    async def send(self, *frames: Frame) -> None:
        await self.worker.queue_frames(list(frames))

    async def caller_said(self, text: str) -> None:
        """The caller's words: the VAD's stop and the segment's final transcript."""
        await self.send(VADUserStoppedSpeakingFrame(stop_secs=0.2),
                        TranscriptionFrame(text, "caller", "", finalized=True))

    def inference(self, text: str, speculation: bool) -> LLMContextFrame:
        messages = [*self.context.messages, {"role": "user", "content": text}]
        return LLMContextFrame(context=LLMContext(messages=messages), speculation=speculation)

    def assistant_messages(self) -> list[str]:
        return [m["content"] for m in self.context.messages if m["role"] == "assistant"]


def _reply(tap: Tap, start: Frame) -> list[Frame]:
    """The non-system frames from ``start`` (a reply's LLMFullResponseStartFrame) to its end, as ``tap`` saw them."""
    frames = [f for f in tap.frames if not isinstance(f, SystemFrame)]
    first = frames.index(start)
    last = next(i for i in range(first, len(frames)) if isinstance(frames[i], LLMFullResponseEndFrame))
    return frames[first : last + 1]


def _no_negative_stage(observer: TurnObserver) -> None:
    stages = [t.stages_ms() for t in observer.turns]
    assert stages and all(v >= 0 for s in stages for v in s.values()), stages


async def test_a_held_reply_is_synthesized_before_the_turn_end_and_heard_only_after_it(server, piper):
    async with Call(server, Piper(piper)) as call:
        await call.send(UserStartedSpeakingFrame())
        await call.caller_said(QUESTION)
        await call.send(call.inference(QUESTION, speculation=True))
        # the TTS made the whole reply while the turn end was still unconfirmed
        start = await call.before.until(is_held_reply)
        await call.before.until(lambda f: isinstance(f, LLMFullResponseEndFrame))
        made = _reply(call.before, start)
        assert any(isinstance(f, TTSAudioRawFrame) for f in made), made
        assert not [f for f in call.after.frames if any(f is m for m in made)], call.after.frames
        assert call.gate.holding and call.after.of(HeldReplyFrame) == []
        assert call.assistant_messages() == []

        await call.send(UserStoppedSpeakingFrame())
        await call.after.until(lambda f: isinstance(f, LLMFullResponseEndFrame))
        end = call.after.of(UserStoppedSpeakingFrame)[0]
        verdict = call.after.of(HeldReplyFrame)
        assert [(v.reply_id, v.released) for v in verdict] == [(start.id, True)]
        # released at the turn end, every frame in the order the TTS made them, the audio first of all after it
        assert _reply(call.after, start) == made
        assert call.after.frames.index(end) < call.after.frames.index(made[0])
        assert call.gate.released == 1 and call.gate.dropped == 0 and call.tts.withdrawals == 0
        await asyncio.wait_for(_until(lambda: call.assistant_messages() != [] and _answered(call.observer)), WAIT_S)
    (turn,) = call.observer.turns
    print(f"reply {turn.reply_text!r}; context {call.context.messages}")
    assert call.assistant_messages() == [turn.reply_text.strip()] and turn.llm_requests == 1
    # timed as the caller got it: nothing of the reply before the turn end, though it was made before it
    assert turn.turn_end is not None and turn.turn_end <= turn.llm_first_token <= turn.tts_first_audio
    _no_negative_stage(call.observer)


async def test_a_withdrawn_reply_is_never_heard_its_synthesis_is_cancelled_and_the_joined_turn_answered_once(
        server, piper):
    """The caller went on while the TTS was inside the reply's first synthesis; the turn then ends on both
    sentences and its own (not speculative) reply is the only one that passes the gate."""
    engine = Piper(piper, hold_first=True)
    async with Call(server, engine) as call:
        await call.send(UserStartedSpeakingFrame())
        await call.caller_said(QUESTION)
        await call.send(call.inference(QUESTION, speculation=True))
        await asyncio.wait_for(asyncio.to_thread(engine.inside_first.wait, WAIT_S), WAIT_S)
        withdrawn = call.text.of(LLMFullResponseStartFrame)[0]
        assert is_held_reply(withdrawn)

        await call.send(EagerEndOfTurnCancelFrame())  # the caller went on (a VAD start)
        await call.after.until(lambda f: isinstance(f, EagerEndOfTurnCancelFrame))
        engine.go.set()  # the synthesis under way finishes in its thread, for a task that was cancelled
        joined = f"{QUESTION} And of Spain?"
        await call.caller_said("And of Spain?")
        await call.send(UserStoppedSpeakingFrame(), call.inference(joined, speculation=False))
        answer = await call.after.until(lambda f: isinstance(f, LLMFullResponseStartFrame))
        await call.after.until(lambda f: isinstance(f, LLMFullResponseEndFrame))
        await asyncio.wait_for(_until(lambda: call.assistant_messages() != []), WAIT_S)

        assert answer is not withdrawn and not is_held_reply(answer)
        assert call.after.of(LLMFullResponseStartFrame) == [answer]
        spoken = {f.context_id for f in call.after.frames if isinstance(f, (TTSStartedFrame, TTSAudioRawFrame))}
        assert spoken and spoken == {f.context_id for f in _reply(call.after, answer) if isinstance(f, TTSStartedFrame)}
        # the TTS was interrupted: the first synthesis' audio never came out of it, nothing more of that reply was
        # synthesized (the answer's clauses come after its one first clause)
        before_answer = call.before.frames[: call.before.frames.index(answer)]
        assert not [f for f in before_answer if isinstance(f, TTSAudioRawFrame)], before_answer
        assert call.tts.withdrawals == 1
        answer_text = "".join(f.text for f in _reply(call.text, answer) if isinstance(f, LLMTextFrame))
        later = set(normalize(" ".join(engine.texts[1:])).split())
        assert len(engine.texts) >= 2 and later <= set(normalize(answer_text).split()), (engine.texts, answer_text)
        await asyncio.wait_for(_until(lambda: _answered(call.observer)), WAIT_S)
    (turn,) = call.observer.turns
    print(f"withdrawn, then {turn.reply_text!r}; synthesized {engine.texts}; context {call.context.messages}")
    assert [v.released for v in call.after.of(HeldReplyFrame)] == [False]
    # the context and the turn's record know only the answer
    assert call.assistant_messages() == [turn.reply_text.strip()] and turn.reply_text.strip() == answer_text.strip()
    assert turn.llm_requests == 1 and not turn.interrupted
    _no_negative_stage(call.observer)


async def test_a_reply_that_is_not_speculative_is_not_held(server, piper):
    """Even while the caller's turn is open (no turn end ever comes): only a speculative reply waits."""
    async with Call(server, Piper(piper)) as call:
        await call.send(UserStartedSpeakingFrame())
        await call.caller_said(QUESTION)
        await call.send(call.inference(QUESTION, speculation=False))
        start = await call.after.until(lambda f: isinstance(f, LLMFullResponseStartFrame))
        await call.after.until(lambda f: isinstance(f, LLMFullResponseEndFrame))
        assert not is_held_reply(start) and call.after.of(UserStoppedSpeakingFrame) == []
        assert _reply(call.after, start) == _reply(call.before, start)
        assert any(isinstance(f, TTSAudioRawFrame) for f in _reply(call.after, start))
        assert call.after.of(HeldReplyFrame) == [] and call.gate.released == call.gate.dropped == 0


async def test_a_turn_end_that_overtakes_the_speculative_reply_releases_it(server, piper):
    """The turn end right behind the speculative request: whichever stage it overtakes, the reply is heard."""
    async with Call(server, Piper(piper)) as call:
        await call.send(UserStartedSpeakingFrame())
        await call.caller_said(QUESTION)
        await call.send(call.inference(QUESTION, speculation=True), UserStoppedSpeakingFrame())
        start = await call.after.until(lambda f: isinstance(f, LLMFullResponseStartFrame))
        await call.after.until(lambda f: isinstance(f, LLMFullResponseEndFrame))
        assert any(isinstance(f, TTSAudioRawFrame) for f in _reply(call.after, start))
        assert all(v.released for v in call.after.of(HeldReplyFrame)) and call.gate.dropped == 0


def test_the_llm_stage_gate_tracks_the_speculation_and_holds_nothing():
    down = FrameDirection.DOWNSTREAM
    gate = UnheldSpeculationGate()
    gate.begin_speculation(True)
    start = LLMFullResponseStartFrame()
    assert gate.process(start, down) == [(start, down)] and gate.is_speculating
    cancel = EagerEndOfTurnCancelFrame()
    assert gate.process(cancel, down) == [(cancel, down)] and not gate.is_speculating
    gate.begin_speculation(True)
    assert gate.is_speculating
    end = UserStoppedSpeakingFrame()
    assert gate.process(end, down) == [(end, down)] and not gate.is_speculating
    gate.begin_speculation(True)  # a request for a turn already over is not speculative
    assert not gate.is_speculating


def _answered(observer: TurnObserver) -> bool:
    """The observer (which runs from a queue) has seen the reply's end and its first audio."""
    return bool(observer.turns) and observer.turns[-1].llm_done and observer.turns[-1].tts_first_audio is not None


async def _until(done: Callable[[], bool]) -> None:
    while not done():
        await asyncio.sleep(0.01)
