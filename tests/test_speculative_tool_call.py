"""A speculative reply that wants a tool call: the tool runs once, on the confirmed turn, and the caller gets one reply.

Pipecat's LLM service never runs a tool for a speculative request (its side effects could not be withdrawn): it
withdraws the request instead (``LLMService.run_function_calls`` broadcasts an ``EagerEndOfTurnCancelFrame``), and
the turn's own request is to run the call. The speculation mixin (``agent.speculative_turn``) has to hear that
withdrawal; when it did not, the turn end "confirmed" the withdrawn reply, no request followed, and the caller got
no answer at all.

Real components: the agent's turn strategies (``make_turn_strategies``: the default segmented smart-turn stop with the
minimum quiet, speculating on finals), pipecat's user and assistant aggregators, the bot's context and tool handling
(``make_context``), the agent's LLM stage on the embedded llama.cpp server (the tool forced, as the 135M model cannot
be trusted to choose it), the agent's TTS stage on the real Piper voice and, with ``llm.speculate_tts``, the
``SpeculativeAudioGate``: the pipeline ``build_worker`` makes from the user aggregator on. The caller's side is
scripted with the frames the VAD and the ASR push; the turn end waits for quiet audio (``vad.turn_min_quiet_secs``),
which is sent only once the LLM's withdrawal is on its way back, so every step waits for a frame, never for a time.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Literal

import pytest
from pipecat.frames.frames import (
    DataFrame,
    EagerEndOfTurnCancelFrame,
    Frame,
    InputAudioRawFrame,
    LLMContextFrame,
    LLMFullResponseStartFrame,
    SystemFrame,
    TranscriptionFrame,
    TTSAudioRawFrame,
    UserStoppedSpeakingFrame,
    VADUserStartedSpeakingFrame,
    VADUserStoppedSpeakingFrame,
)
from pipecat.pipeline.pipeline import Pipeline
from pipecat.pipeline.worker import PipelineParams, PipelineWorker
from pipecat.processors.aggregators.llm_response_universal import (
    LLMUserAggregatorParams,
)
from pipecat.processors.frame_processor import FrameDirection, FrameProcessor
from pipecat.utils.time import time_now_iso8601
from pipecat.workers.runner import WorkerRunner

from agent.bot import Bot, Say
from agent.call_control import CallControl
from agent.config import Config
from agent.llm_server import ManagedLLMServer, embedded_llama_server
from agent.llm_stage import CadenceLLMService
from agent.models import piper_voice
from agent.pipeline import make_context, make_turn_strategies
from agent.speculative_audio_gate import SpeculativeAudioGate
from agent.speculative_turn import SpeculationStats
from agent.user_aggregator import CadenceAggregatorPair
from tts.engines import PiperEngine
from tts.service import CadenceTTSService

pytest.importorskip("llama_cpp")
pytest.importorskip("piper")

WAIT_S = 120.0  # a hang guard only: every wait is for a frame or a condition
RATE = 16000
QUESTION = "What is the weather in Paris?"
ANSWER = "It is sunny in Paris."


@pytest.fixture(scope="module")
def server() -> Iterator[ManagedLLMServer]:
    with embedded_llama_server(threads=2) as srv:
        yield srv


@pytest.fixture(scope="module")
def piper() -> PiperEngine:
    return PiperEngine(piper_voice())


@dataclass
class Probe(SystemFrame):
    """Queued after a frame pushed upstream into the user aggregator: it passes the aggregator after that one."""


@dataclass
class Mark(DataFrame):
    """Follows, in order, every non-system frame queued before it at each stage."""


class Tap(FrameProcessor):
    """Records the frames that pass it, each after pushing it on.

    With ``delay_withdrawal`` (between the user aggregator and the LLM) the LLM's withdrawal waits here on its way
    back until the turn end has passed downstream: the two cross, as they can when the tool call is reached just
    before the LLM sees the turn end.
    """

    def __init__(self, name: str, delay_withdrawal: bool = False) -> None:
        super().__init__(name=name)
        self.down: list[Frame] = []
        self.up: list[Frame] = []
        self._delay = delay_withdrawal
        self._delayed: list[Frame] = []

    async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
        await super().process_frame(frame, direction)
        if self._delay and direction == FrameDirection.UPSTREAM and isinstance(frame, EagerEndOfTurnCancelFrame):
            self._delayed.append(frame)
            self.up.append(frame)
            return
        await self.push_frame(frame, direction)
        if isinstance(frame, UserStoppedSpeakingFrame) and direction == FrameDirection.DOWNSTREAM:
            delayed, self._delayed = self._delayed, []
            for withdrawal in delayed:
                await self.push_frame(withdrawal, FrameDirection.UPSTREAM)
        (self.down if direction == FrameDirection.DOWNSTREAM else self.up).append(frame)

    def of(self, cls: type) -> list[Any]:
        return [f for f in self.down if isinstance(f, cls)]

    async def until(self, found: Callable[[Frame], bool], upstream: bool = False) -> Frame:
        frames = self.up if upstream else self.down

        async def poll() -> Frame:
            while not (hits := [f for f in frames if found(f)]):
                await asyncio.sleep(0.01)
            return hits[0]

        return await asyncio.wait_for(poll(), WAIT_S)


class Call:
    """user aggregator -> [turn tap] -> LLM -> TTS -> (gate) -> [out tap] -> assistant aggregator, with a bot tool."""

    def __init__(self, server: ManagedLLMServer, piper: PiperEngine, *, speculate_tts: bool, late: bool) -> None:
        config = Config()
        config.llm.max_tokens = 48
        config.llm.speculate_tts = speculate_tts
        assert config.llm.speculate == "final"
        self.config = config
        bot = Bot("You tell callers the weather.", tool_choice="weather")
        bot.configure(config)
        self.ran: list[str] = []

        @bot.tool(filler="")
        async def weather(city: Literal["Paris", "Rome"]) -> Say:
            """Today's weather in a city."""
            self.ran.append(city)
            return Say(ANSWER)

        self.llm = CadenceLLMService(config.llm, server.base_url, server.model_id, hold_after_tts=speculate_tts)
        self.control = CallControl("spectool", config.call)
        self.control.llm = self.llm
        self.context = make_context(bot, self.llm, self.control, config.call)
        self.stats = SpeculationStats()
        # pipecat's 5 s stop watchdog would end a turn whose withdrawal is slow to come (and mask the bug): kept out
        params = LLMUserAggregatorParams(user_turn_strategies=make_turn_strategies(config, self.stats),
                                         user_turn_stop_timeout=WAIT_S)
        pair = CadenceAggregatorPair(self.context, user_params=params)
        self.turn, self.out = Tap("turn", delay_withdrawal=late), Tap("out")
        tts = CadenceTTSService(piper, withdraw_on_cancel=speculate_tts)
        gate = [SpeculativeAudioGate()] if speculate_tts else []
        pipeline = Pipeline([pair.user(), self.turn, self.llm, tts, *gate, self.out, pair.assistant()])
        self.worker = PipelineWorker(pipeline, params=PipelineParams(audio_in_sample_rate=RATE,
                                                                     audio_out_sample_rate=piper.sample_rate),
                                     enable_rtvi=False, idle_timeout_secs=None)

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

    async def caller_asks(self, text: str) -> None:
        """The VAD's start and stop around the caller's words, and the segment's final transcript."""
        vad = self.config.vad
        await self.send(VADUserStartedSpeakingFrame(start_secs=vad.start_secs),
                        VADUserStoppedSpeakingFrame(stop_secs=vad.stop_secs),
                        TranscriptionFrame(text, "caller", time_now_iso8601(), finalized=True))

    async def quiet(self) -> None:
        """Enough quiet audio (20 ms frames) for the minimum quiet to let the turn end through."""
        frames = int((self.config.vad.turn_min_quiet_secs + 0.15) / 0.02)
        await self.send(*[InputAudioRawFrame(audio=bytes(2 * RATE // 50), sample_rate=RATE, num_channels=1)
                          for _ in range(frames)])

    async def settle(self) -> None:
        """Wait until what the user aggregator had been given by now has come out of it: a frame pushed upstream
        into it (the LLM's withdrawal) and what that made it queue for itself (an ``LLMRunFrame``)."""
        probe, mark = Probe(), Mark()
        await self.send(probe)
        await self.turn.until(lambda f: f is probe)
        await self.send(mark)
        await self.turn.until(lambda f: f is mark)

    def turn_requests(self) -> list[LLMContextFrame]:
        return [f for f in self.turn.of(LLMContextFrame) if not f.speculation]

    def assistant_texts(self) -> list[str]:
        return [m["content"] for m in self.context.get_messages()
                if m.get("role") == "assistant" and isinstance(m.get("content"), str)]


async def _until(done: Callable[[], bool]) -> None:
    async def poll() -> None:
        while not done():
            await asyncio.sleep(0.01)

    await asyncio.wait_for(poll(), WAIT_S)


async def _speculative_tool_call_is_answered_once(call: Call) -> None:
    await call.caller_asks(QUESTION)
    speculative = await call.turn.until(lambda f: isinstance(f, LLMContextFrame) and f.speculation)
    assert call.turn_requests() == []  # the turn is still open: only the speculative request so far
    # the LLM withdraws it on reaching the tool call; its withdrawal is on its way back to the user aggregator
    await call.turn.until(lambda f: isinstance(f, EagerEndOfTurnCancelFrame), upstream=True)
    assert call.ran == [] and call.control.tool_log.calls == []

    await call.quiet()  # the turn end goes through
    await call.turn.until(lambda f: isinstance(f, UserStoppedSpeakingFrame))
    await call.settle()
    requests = call.turn_requests()
    assert len(requests) == 1, f"the confirmed turn made no request of its own: {call.stats.snapshot()}"
    assert requests[0] is not speculative
    assert call.stats.snapshot() == {"started": {"final": 1}, "confirmed": 0, "withdrawn": {"tool_call": 1},
                                     "wasted": 1}

    await _until(lambda: call.assistant_texts() == [ANSWER])
    mark = Mark()
    await call.send(mark)  # through the whole pipeline: whatever was still on its way is out before it
    await call.out.until(lambda f: f is mark)
    print(f"tool log {call.control.tool_log.calls}; context {call.context.get_messages()}")
    assert call.ran in (["Paris"], ["Rome"]) and len(call.control.tool_log.calls) == 1
    # one reply reached the caller: the turn's own, none of the withdrawn one
    spoken = {f.context_id for f in call.out.of(TTSAudioRawFrame)}
    assert len(spoken) == 1, spoken
    assert len(call.out.of(LLMFullResponseStartFrame)) == 1
    assert [m["content"] for m in call.context.get_messages() if m.get("role") == "user"] == [QUESTION]
    assert call.assistant_texts() == [ANSWER]


@pytest.mark.parametrize("speculate_tts", [True, False], ids=["speculate_tts", "text_held"])
async def test_a_speculative_reply_that_wants_a_tool_is_answered_by_the_turn(server, piper, speculate_tts):
    """The withdrawal is back before the turn ends: the turn end makes the turn's request, which runs the tool."""
    async with Call(server, piper, speculate_tts=speculate_tts, late=False) as call:
        await _speculative_tool_call_is_answered_once(call)


@pytest.mark.parametrize("speculate_tts", [True, False], ids=["speculate_tts", "text_held"])
async def test_a_withdrawal_that_crosses_the_turn_end_still_gets_the_turn_answered(server, piper, speculate_tts):
    """The withdrawal comes back only after the turn end confirmed the speculation: the turn is requested then."""
    async with Call(server, piper, speculate_tts=speculate_tts, late=True) as call:
        await _speculative_tool_call_is_answered_once(call)
