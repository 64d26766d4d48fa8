"""Parakeet's partial at the caller's pause (``asr.pause.CallerPauseFrame``): the STT asks its batcher for a partial
of everything heard so far and pushes the first one holding it, marked ``at_pause``, even when its text repeats; with
``final_from_pause`` that partial is the final when nothing audible followed the pause."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
from pipecat.frames.frames import (
    Frame,
    InputAudioRawFrame,
    InterimTranscriptionFrame,
    TranscriptionFrame,
    VADUserStartedSpeakingFrame,
    VADUserStoppedSpeakingFrame,
)
from pipecat.pipeline.pipeline import Pipeline
from pipecat.pipeline.worker import PipelineParams
from pipecat.tests.utils import SleepFrame, run_test

from asr.parakeet.batcher import StreamBatcher
from asr.parakeet.engine import ParakeetEngine
from asr.parakeet.streaming import StreamConfig
from asr.parakeet.stt_service import ParakeetSTTService
from asr.parakeet.tiny import synthetic_speech
from asr.pause import CallerPauseFrame

SPEECH_S = 1.0


@pytest.fixture(scope="module")
def batcher(tiny_dir) -> StreamBatcher:
    # a partial every 2 s: none comes from the cadence inside this utterance, only the one the pause asks for
    return StreamBatcher(ParakeetEngine.from_pretrained(tiny_dir), StreamConfig(chunk_ms=160, partial_interval_ms=2000))


def _audio(samples: np.ndarray) -> list[Frame]:
    pcm = (np.clip(samples, -1, 1) * 32767).astype(np.int16)
    out: list[Frame] = []
    for lo in range(0, len(pcm), 320):
        out += [InputAudioRawFrame(audio=pcm[lo:lo + 320].tobytes(), sample_rate=16000, num_channels=1),
                SleepFrame(sleep=0.004)]
    return out


async def _frames(batcher: StreamBatcher, pause: bool, after: np.ndarray | None = None,
                  final_from_pause: bool = True) -> list[Frame]:
    """An utterance (1 s of synthetic speech), the pause (or none), then ``after`` (default 0.32 s of quiet), the
    VAD's stop: what the STT pushed downstream."""
    speech = synthetic_speech(SPEECH_S, seed=21)
    after = np.zeros(int(0.32 * 16000), np.float32) if after is None else after
    frames = [VADUserStartedSpeakingFrame(start_secs=0.1), *_audio(speech), SleepFrame(sleep=0.1),
              *([CallerPauseFrame(quiet=True)] if pause else []), SleepFrame(sleep=0.05), *_audio(after),
              SleepFrame(sleep=0.2), VADUserStoppedSpeakingFrame(stop_secs=0.2), SleepFrame(sleep=0.5)]
    stt = ParakeetSTTService(batcher, preroll_s=0.0, audio_passthrough=False, final_from_pause=final_from_pause)
    down, _ = await run_test(Pipeline([stt]), frames_to_send=frames,
                             pipeline_params=PipelineParams(audio_in_sample_rate=16000))
    return down


async def _interims(batcher: StreamBatcher, pause: bool) -> list[InterimTranscriptionFrame]:
    return [f for f in await _frames(batcher, pause) if isinstance(f, InterimTranscriptionFrame)]


def _split(frames: list[Frame]) -> tuple[InterimTranscriptionFrame, TranscriptionFrame]:
    at_pause = [f for f in frames if isinstance(f, InterimTranscriptionFrame) and f.result.at_pause]
    finals = [f for f in frames if isinstance(f, TranscriptionFrame)]
    assert len(at_pause) == 1 and len(finals) == 1, frames
    return at_pause[0], finals[0]


async def test_the_pause_asks_for_a_partial_that_holds_everything_heard(batcher):
    interims = await _interims(batcher, pause=True)
    at_pause = [f for f in interims if f.result.at_pause]
    assert len(at_pause) == 1, [(f.text, f.result.at_pause) for f in interims]
    assert at_pause[0].text and at_pause[0].result.result.audio_s >= SPEECH_S


async def test_without_a_pause_no_partial_is_marked(batcher):
    interims = await _interims(batcher, pause=False)
    assert not any(f.result.at_pause for f in interims)


async def test_the_partial_at_the_pause_is_the_final_pass_over_the_audio_so_far(batcher):
    """Not the chunk-by-chunk text: a fresh decode of the whole utterance, the tokens a final gives for that audio."""
    audio = synthetic_speech(SPEECH_S, seed=21)
    got = asyncio.get_running_loop().create_future()
    paused = batcher.open(on_partial=lambda result: got.done() or got.set_result(result))
    alone = batcher.open()
    try:
        batcher.feed(paused, audio)
        batcher.feed(alone, audio)
        batcher.request_partial(paused, fresh=True)
        partial = await asyncio.wait_for(got, 30)
        final = await batcher.finalize(alone)
    finally:
        batcher.close(paused)
        batcher.close(alone)
    assert partial.tokens and partial.tokens == final.tokens and partial.frames == final.frames


async def test_quiet_after_the_pause_makes_the_partial_the_final(batcher):
    finals_before = batcher.stats.finals
    partial, final = _split(await _frames(batcher, pause=True))
    assert final.text == partial.text and final.result.tokens == partial.result.result.tokens
    assert final.result.final and final.result.audio_s >= SPEECH_S + 0.3  # all the audio fed, the quiet included
    assert batcher.stats.finals == finals_before  # no final decode of the quiet


async def test_speech_after_the_pause_is_decoded_into_the_final(batcher):
    """The caller said more after the pause (no VAD start: the window had not run out): the final decodes it."""
    finals_before = batcher.stats.finals
    _split(await _frames(batcher, pause=True, after=synthetic_speech(0.8, seed=22)))
    assert batcher.stats.finals == finals_before + 1


async def test_with_final_from_pause_off_the_final_is_decoded(batcher):
    finals_before = batcher.stats.finals
    _split(await _frames(batcher, pause=True, final_from_pause=False))
    assert batcher.stats.finals == finals_before + 1


def test_a_fresh_partial_asked_while_a_chunk_window_decodes_is_still_owed(batcher):
    """The pause's request can land while a chunk-by-chunk window is in flight: that window's result is not the
    fresh decode (``fresh`` False, so the STT does not take it for the pause's partial) and the request stays owed."""
    session = batcher.open()
    try:
        session.push(synthetic_speech(SPEECH_S, seed=21))
        chunk_window = session.next_request()
        assert chunk_window is not None and not chunk_window.fresh
        session.partial_requested = session.fresh_requested = True  # request_partial(fresh=True), mid-tick
        (seq, carry, end), = batcher.process([chunk_window])
        assert not session.apply(chunk_window, seq, carry, end).fresh
        assert session.fresh_requested and session.partial_due()
        owed = session.next_request()
        assert owed is not None and owed.fresh
        (seq, carry, end), = batcher.process([owed])
        assert session.apply(owed, seq, carry, end).fresh and not session.fresh_requested
    finally:
        batcher.close(session)
