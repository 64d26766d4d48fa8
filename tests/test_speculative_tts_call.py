"""``llm.speculate_tts`` in the agent's own pipeline (``build_worker``): real recorded calls, heard as the caller hears them.

The default CPU cascade (Silero VAD, Moonshine tiny-en with the Whisper fallback, smart-turn with the minimum
quiet, the embedded llama.cpp server, Piper) plays recorded Asterisk prompts in real time through the file
transport, as ``cadence talk`` does. Whether a speculative reply was withdrawn or its audio was ready before the
turn end depends on the box's speed, so that is printed, not asserted; what is asserted holds either way: the
gate sits between the TTS and the output, the caller hears one reply per utterance and none of it before its
turn end, every confirmed speculation is released by the gate and every withdrawal reaches the TTS, and the
context holds only the replies heard.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
from pipecat.processors.aggregators.llm_response_universal import LLMAssistantAggregator
from pipecat.processors.frame_processor import FrameProcessor

from agent.capacity.corpus import ASTERISK_DIR
from agent.config import Config
from agent.llm_server import ManagedLLMServer, embedded_llama_server
from agent.llm_stage import CadenceLLMService
from agent.metrics.observer import MetricsObserver
from agent.metrics.stages import StageMetrics
from agent.pipeline import Engines, build_worker
from agent.speculative_audio_gate import SpeculativeAudioGate
from agent.turn_observer import TurnObserver, TurnTiming
from testkit.talk_clips import talk_clips
from transports.file_transport import CallScript, FileOutputTransport, FileTransport, run_until_script_done
from transports.params import transport_params
from tts.service import CadenceTTSService

pytest.importorskip("llama_cpp")
pytest.importorskip("moonshine_voice")
pytestmark = [pytest.mark.slow, pytest.mark.skipif(not (ASTERISK_DIR / "ss-noservice.wav").is_file(),
                                                   reason="needs asterisk-core-sounds-en-wav (scripts/install.sh)")]

CLIPS = ["conf-onlyperson", "ss-noservice", "pbx-invalid"]  # the last two hold a ~0.3 s pause between sentences


@pytest.fixture(scope="module")
def server() -> Iterator[ManagedLLMServer]:
    with embedded_llama_server(threads=2) as srv:
        yield srv


def _config(**llm: Any) -> Config:
    config = Config()
    config.llm.max_tokens = 24
    for key, value in llm.items():
        setattr(config.llm, key, value)
    return config


def _stages(worker: Any) -> list[FrameProcessor]:
    def walk(processor: FrameProcessor) -> Iterator[FrameProcessor]:
        for p in processor.processors:
            yield p
            yield from walk(p)

    return list(walk(worker.pipeline))


def _after(stages: list[FrameProcessor], cls: type) -> FrameProcessor:
    return stages[next(i for i, p in enumerate(stages) if isinstance(p, cls)) + 1]


async def _call(engines: Engines, audio: list[Any], metrics: StageMetrics
                ) -> tuple[list[TurnTiming], list[FrameProcessor]]:
    """``agent.talk.talk``'s run with the session's stage metrics too, keeping the worker's stages."""
    cfg = engines.config
    script = CallScript(audio, max_wait_s=15.0)
    transport = FileTransport(transport_params(cfg.audio.in_sample_rate, cfg.audio.out_sample_rate), script)
    loop = asyncio.get_running_loop()
    observer = TurnObserver(on_turn=lambda _t: loop.call_later(0.3, script.turn_done.set))
    worker = build_worker(engines, transport, observers=[observer, MetricsObserver(metrics)])
    await run_until_script_done(worker, script)
    return observer.turns, _stages(worker)


def test_each_utterance_is_answered_once_and_heard_only_after_its_turn_end(server):
    config = _config()
    engines = Engines.load(config, server.base_url, server.model_id)
    clips = talk_clips(config.audio.in_sample_rate, single=CLIPS, joined=[])
    metrics, samples = StageMetrics(), []
    metrics.add_listener(lambda stage, value, _now: samples.append((stage, value)))
    turns, stages = asyncio.run(_call(engines, [c.audio for c in clips], metrics))
    gate, tts = _after(stages, CadenceTTSService), _after(stages, CadenceLLMService)
    stats = engines.speculation_stats.snapshot()
    for t in turns:
        print(f"turn {t.index}: [{t.transcript_text}] -> [{t.reply_text.strip()}] requests {t.llm_requests}, "
              f"first audio {t.stages_ms().get('eos_to_first_audio', float('nan')):.0f} ms after the end of speech")
    print(f"speculation {stats}; gate released {gate.released}, dropped {gate.dropped}; "
          f"TTS withdrawals {tts.withdrawals}")

    assert isinstance(gate, SpeculativeAudioGate) and isinstance(tts, CadenceTTSService)
    assert isinstance(_after(stages, SpeculativeAudioGate), FileOutputTransport)
    answered = [t for t in turns if t.llm_requests]
    assert len(answered) == len(clips) and all(t.llm_requests == 1 for t in answered), turns
    for t in answered:  # none of a reply before its turn end: the caller heard it from its release on
        assert t.turn_end is not None and t.first_audio_out is not None and t.first_audio_out >= t.turn_end, t
        assert t.turn_end <= t.llm_first_token <= t.tts_first_audio, t
        assert all(v >= 0 for v in t.stages_ms().values()), t.stages_ms()
    # the session's stage histograms: one sample a turn for each reply stage, a withdrawn reply timing nothing
    for stage in ("turn_end", "llm_first_token", "first_clause", "tts_first_audio", "audio_out", "first_audio"):
        values = [v for s, v in samples if s == stage]
        assert len(values) == len(clips) and min(values) >= 0, (stage, values)
    assert stats["confirmed"] >= 1 and gate.released == stats["confirmed"]
    assert tts.withdrawals == stats["wasted"] and gate.dropped <= stats["wasted"]
    context = next(p for p in stages if isinstance(p, LLMAssistantAggregator)).context
    roles = [m["role"] for m in context.messages]
    assert roles == ["user", "assistant"] * len(clips), context.messages


async def test_the_gate_is_there_only_when_replies_are_speculated_and_speculate_tts_is_on(server):
    engines = Engines(_config(), server.base_url, server.model_id, tts_engine=_NoTTS())
    for llm, gated in [({}, True), ({"speculate_tts": False}, False), ({"speculate": ""}, False)]:
        engines.config = _config(**llm)
        script = CallScript([])
        transport = FileTransport(transport_params(16000, 24000), script)
        stages = _stages(build_worker(engines, transport))
        assert any(isinstance(p, SpeculativeAudioGate) for p in stages) is gated, llm
        assert isinstance(_after(stages, CadenceTTSService), SpeculativeAudioGate if gated else FileOutputTransport)


class _NoTTS:
    """Stands in for the voice where nothing is spoken: only the pipeline's shape is looked at."""

    name, sample_rate = "none", 16000

    def synthesize(self, text: str) -> Iterator[bytes]:
        return iter(())
