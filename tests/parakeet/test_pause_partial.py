"""Parakeet's partial at the caller's pause (``asr.pause.CallerPauseFrame``): the STT asks its batcher for a partial
of everything heard so far and pushes the first one holding it, marked ``at_pause``, even when its text repeats."""

from __future__ import annotations

import numpy as np
import pytest
from pipecat.frames.frames import (
    Frame,
    InputAudioRawFrame,
    InterimTranscriptionFrame,
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


async def _interims(batcher: StreamBatcher, pause: bool) -> list[InterimTranscriptionFrame]:
    speech, quiet = synthetic_speech(SPEECH_S, seed=21), np.zeros(int(0.32 * 16000), np.float32)
    frames = [VADUserStartedSpeakingFrame(start_secs=0.1), *_audio(speech), SleepFrame(sleep=0.1),
              *([CallerPauseFrame(quiet=True)] if pause else []), *_audio(quiet),
              VADUserStoppedSpeakingFrame(stop_secs=0.2), SleepFrame(sleep=0.5)]
    stt = ParakeetSTTService(batcher, preroll_s=0.0, audio_passthrough=False)
    down, _ = await run_test(Pipeline([stt]), frames_to_send=frames,
                             pipeline_params=PipelineParams(audio_in_sample_rate=16000))
    return [f for f in down if isinstance(f, InterimTranscriptionFrame)]


async def test_the_pause_asks_for_a_partial_that_holds_everything_heard(batcher):
    interims = await _interims(batcher, pause=True)
    at_pause = [f for f in interims if f.result.at_pause]
    assert len(at_pause) == 1, [(f.text, f.result.at_pause) for f in interims]
    assert at_pause[0].text and at_pause[0].result.result.audio_s >= SPEECH_S


async def test_without_a_pause_no_partial_is_marked(batcher):
    interims = await _interims(batcher, pause=False)
    assert not any(f.result.at_pause for f in interims)
