"""CadenceTTSService over the Kokoro engine in a real pipecat pipeline (PipelineWorker via run_test)."""

from __future__ import annotations

from pipecat.frames.frames import (
    ErrorFrame,
    InterruptionFrame,
    LLMFullResponseEndFrame,
    LLMFullResponseStartFrame,
    TextFrame,
    TTSAudioRawFrame,
    TTSSpeakFrame,
    TTSStartedFrame,
    TTSStoppedFrame,
)
from pipecat.pipeline.worker import PipelineParams
from pipecat.tests.utils import SleepFrame, run_test

from tts.service import CadenceTTSService

PARAMS = PipelineParams(audio_out_sample_rate=24000)


def _expected_bytes(engine, text: str) -> int:
    """PCM bytes of ``text``: 600 samples per predicted frame (durations do not depend on the noise)."""
    units = list(engine.utterances(text))
    return sum(2 * len(a) for a in engine.model.synthesize(units).audio)


async def test_speak_frame_becomes_audio(engine):
    text = "Hello there. How are you today?"
    down, _ = await run_test(CadenceTTSService(engine), frames_to_send=[TTSSpeakFrame(text), SleepFrame(sleep=0.1)],
                             pipeline_params=PARAMS)
    audio = [f for f in down if isinstance(f, TTSAudioRawFrame)]
    assert audio and all(f.sample_rate == 24000 and f.num_channels == 1 for f in audio)
    assert sum(len(f.audio) for f in audio) == _expected_bytes(engine, text)
    kinds = [type(f) for f in down]
    assert kinds.index(TTSStartedFrame) < kinds.index(TTSAudioRawFrame) < kinds.index(TTSStoppedFrame)
    assert not [f for f in down if isinstance(f, ErrorFrame)]
    assert engine.batcher.pending == 0


async def test_llm_text_frames_become_audio(engine):
    frames = [LLMFullResponseStartFrame(), TextFrame("Sure, I can "), TextFrame("help with that. "),
              TextFrame("Anything else?"), LLMFullResponseEndFrame(), SleepFrame(sleep=0.1)]
    down, _ = await run_test(CadenceTTSService(engine), frames_to_send=frames, pipeline_params=PARAMS)
    audio = b"".join(f.audio for f in down if isinstance(f, TTSAudioRawFrame))
    assert len(audio) > 24000  # more than half a second of speech
    assert not [f for f in down if isinstance(f, ErrorFrame)]


async def test_interruption_withdraws_queued_clauses(engine):
    long_text = ("Your order left the warehouse this morning. It is on the truck now. The driver will call "
                 "before arriving. Please keep your phone nearby.")
    cancelled = engine.batcher.stats.cancelled
    with engine.batcher.held():  # the caller barges in while its clause is still queued
        frames = [TTSSpeakFrame(long_text), SleepFrame(sleep=0.3), InterruptionFrame(), SleepFrame(sleep=0.2)]
        down, _ = await run_test(CadenceTTSService(engine), frames_to_send=frames, pipeline_params=PARAMS)
        assert engine.batcher.pending == 0
    assert engine.batcher.stats.cancelled == cancelled + 1
    assert not [f for f in down if isinstance(f, TTSAudioRawFrame)]
    # the engine keeps serving the next turn
    down, _ = await run_test(CadenceTTSService(engine), frames_to_send=[TTSSpeakFrame("Okay."), SleepFrame(sleep=0.1)],
                             pipeline_params=PARAMS)
    assert [f for f in down if isinstance(f, TTSAudioRawFrame)]


class _StallingEngine:
    """The tiny Kokoro engine whose stream stalls ``stall_s`` before its second piece: an overloaded GPU (or the
    CPU box's Piper at 0.5x) delivering a reply's later clause late."""

    def __init__(self, engine, stall_s: float) -> None:
        self._engine, self.stall_s = engine, stall_s
        self.name, self.sample_rate = engine.name, engine.sample_rate

    async def synthesize_stream(self, text: str, **kw):
        import asyncio

        n = 0
        async for piece in self._engine.synthesize_stream(text, **kw):
            if n == 1:
                await asyncio.sleep(self.stall_s)
            n += 1
            yield piece


async def test_a_reply_whose_later_clause_stalls_stays_one_reply(engine):
    """pipecat closes an audio context after 3 s without audio (``stop_frame_timeout_s``), so a later clause that
    came 3 s late went out under a new context: the caller heard one reply as two (two TTS responses, counted as
    the turn answered twice on the overloaded CPU box). The service waits longer than any clause's stall."""
    text = "Sure, I can help with that. Your order ships today, and it should arrive on Friday."
    frames = [LLMFullResponseStartFrame(), TextFrame(text), LLMFullResponseEndFrame(), SleepFrame(sleep=4.5)]
    service = CadenceTTSService(_StallingEngine(engine, 3.5))  # type: ignore[arg-type]
    down, _ = await run_test(service, frames_to_send=frames, pipeline_params=PARAMS)
    audio = [f for f in down if isinstance(f, TTSAudioRawFrame)]
    assert len(audio) >= 2 and len({f.context_id for f in audio}) == 1, {f.context_id for f in audio}
    assert sum(isinstance(f, TTSStartedFrame) for f in down) == 1
    assert sum(isinstance(f, TTSStoppedFrame) for f in down) == 1
