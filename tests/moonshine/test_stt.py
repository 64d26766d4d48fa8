"""``MoonshineSTTService`` in a pipecat pipeline on real recorded speech: one transcript per VAD segment."""

from __future__ import annotations

import numpy as np
import pytest
from pipecat.frames.frames import (
    InputAudioRawFrame,
    TranscriptionFrame,
    VADUserStartedSpeakingFrame,
    VADUserStoppedSpeakingFrame,
)
from pipecat.pipeline.worker import PipelineParams
from pipecat.tests.utils import SleepFrame, run_test

from agent.config import load_config
from agent.pipeline import Engines, make_turn_strategies
from agent.segment_turn_stop import SegmentedTurnAnalyzerStopStrategy
from asr.eager_segment import EagerSegment
from asr.moonshine.stt import MoonshineSTTService, create_moonshine_stt
from asr.options import ASRConfig
from testkit.corpus import wer
from testkit.talk_clips import talk_clips

SEGMENT_WER_MAX = 0.2
NAMES = ["agent-pass", "vm-goodbye"]


def _segment(audio: np.ndarray, rate: int, quiet_s: float = 0.3) -> list:
    """One VAD segment: the speech, ``quiet_s`` of silence (the VAD's stop window), then the stop."""
    pcm = (np.clip(np.concatenate([audio, np.zeros(int(quiet_s * rate), np.float32)]), -1, 1) * 32767)
    pcm = pcm.astype(np.int16)
    step = rate // 50
    frames: list = [VADUserStartedSpeakingFrame()]
    for lo in range(0, len(pcm), step):
        frames += [InputAudioRawFrame(audio=pcm[lo:lo + step].tobytes(), sample_rate=rate, num_channels=1),
                   SleepFrame(sleep=0.001)]
    return [*frames, VADUserStoppedSpeakingFrame(stop_secs=0.2), SleepFrame(sleep=0.6)]


async def _transcripts(service: MoonshineSTTService, rate: int) -> tuple[list, list]:
    clips = talk_clips(rate, single=NAMES, joined=[])
    frames = [f for c in clips for f in _segment(c.audio, rate)]
    down, _ = await run_test(service, frames_to_send=frames, pipeline_params=PipelineParams(audio_in_sample_rate=rate))
    return clips, [f for f in down if isinstance(f, TranscriptionFrame)]


@pytest.mark.parametrize("rate", [16000, 8000])
async def test_each_segment_gets_its_transcript(model, rate):
    """16 kHz as the pipeline runs by default; 8 kHz (the prompts' own rate) is resampled to the model's
    16 kHz (taken as 16 kHz audio it would be other, faster speech)."""
    service = MoonshineSTTService(model, audio_passthrough=False)
    clips, finals = await _transcripts(service, rate)
    assert len(finals) == len(clips), [f.text for f in finals]
    for clip, final in zip(clips, finals, strict=True):
        assert final.finalized and wer(clip.text, final.text) <= SEGMENT_WER_MAX, (clip.name, final.text)


async def test_the_eager_pass_is_used_when_the_caller_stayed_quiet(model):
    service = MoonshineSTTService(model, eager=EagerSegment(120.0), audio_passthrough=False)
    clips, finals = await _transcripts(service, 16000)
    assert [wer(c.text, f.text) <= SEGMENT_WER_MAX for c, f in zip(clips, finals, strict=True)] == [True, True]
    assert service.eager_used == len(clips), (service.eager_used, service.eager_discarded)


async def test_a_segment_without_speech_gets_an_empty_transcript(model):
    """One frame per segment, empty included: the segmented turn end counts on it."""
    service = MoonshineSTTService(model, audio_passthrough=False)
    noise = np.random.default_rng(1).normal(0, 0.01, 16000).astype(np.float32)
    down, _ = await run_test(service, frames_to_send=_segment(noise, 16000),
                             pipeline_params=PipelineParams(audio_in_sample_rate=16000))
    assert [f.text for f in down if isinstance(f, TranscriptionFrame)] == [""]


def test_the_runtime_builds_it_for_asr_engine_moonshine():
    config = load_config(None, ["asr.engine=moonshine"])
    engines = Engines(config, "http://127.0.0.1:9", "m", tts_engine=None)  # type: ignore[arg-type]
    stt = engines.make_stt()
    assert isinstance(stt, MoonshineSTTService) and stt._settings.model == "moonshine-tiny-en"
    assert stt._model is create_moonshine_stt(config.asr, str(stt._model.folder))._model  # one model per process
    assert isinstance(make_turn_strategies(config).stop[0], SegmentedTurnAnalyzerStopStrategy)
    with pytest.raises(ValueError, match="CPU"):
        create_moonshine_stt(ASRConfig(engine="moonshine", device="cuda"), str(stt._model.folder))
    with pytest.raises(ValueError, match="English only"):
        create_moonshine_stt(ASRConfig(engine="moonshine", language="de"), str(stt._model.folder))
