"""``asr.fallback = "whisper"``: Moonshine's unsure transcripts are redone by Whisper (real models, recorded prompts)."""

from __future__ import annotations

import numpy as np
import pytest
from pipecat.frames.frames import TranscriptionFrame
from pipecat.pipeline.worker import PipelineParams
from pipecat.tests.utils import run_test

from agent.config import load_config
from agent.models import whisper_model_dir
from agent.pipeline import Engines
from asr.moonshine.stt import MoonshineSTTService, whisper_fallback
from asr.moonshine.whisper_fallback import FallbackCounts, WhisperFallback
from asr.options import ASRConfig
from asr.whisper_model import shared_whisper_model, transcribe_greedy
from testkit.corpus import wer
from testkit.talk_clips import Clip, recorded_phrase
from tests.moonshine.test_stt import _segment

# Moonshine tiny-en misreads these and knows it (lowest token probability ~0.2); Whisper gets them right.
UNSURE = ["astcc-followed-by-the-pound-key", "agent-loginok"]
SURE = ["conf-onlyperson"]  # every token at >= 0.8


def _padded(names: list[str]) -> Clip:
    """The prompt with 0.5 s of quiet on each side, as a VAD segment reaches the service (lead-in and padding)."""
    clip = recorded_phrase(names)
    quiet = np.zeros(8000, np.float32)
    return Clip(clip.name, clip.text, np.concatenate([quiet, clip.audio, quiet]))


@pytest.fixture(scope="module")
def whisper():
    model = shared_whisper_model(str(whisper_model_dir()), "cpu", "int8", 2)
    return lambda samples: transcribe_greedy(model, samples, "en", 0.9)


def test_unsure_segments_go_to_whisper_and_sure_ones_stay(model, whisper):
    counts = FallbackCounts()
    fallback = WhisperFallback(model, whisper, 0.5, counts)
    for name in UNSURE:
        clip = _padded([name])
        own = model.transcribe_scored(clip.audio)
        assert own.min_prob < 0.5 and wer(clip.text, own.text) > 0.3, (name, own)  # the case this is for
        text, engine = fallback.transcribe(clip.audio)
        assert engine == "whisper" and wer(clip.text, text) == 0.0, (name, text)
    clip = _padded(SURE)
    own = model.transcribe_scored(clip.audio)
    assert own.min_prob >= 0.5 and own.stopped
    assert fallback.transcribe(clip.audio) == (own.text, "moonshine") and wer(clip.text, own.text) == 0.0
    assert (counts.moonshine, counts.whisper) == (1, len(UNSURE))


def test_the_threshold_bounds(model, whisper):
    clip = _padded(UNSURE[:1])
    assert WhisperFallback(model, whisper, 0.0, FallbackCounts()).transcribe(clip.audio)[1] == "moonshine"
    assert WhisperFallback(model, whisper, 1.0, FallbackCounts()).transcribe(clip.audio)[1] == "whisper"
    with pytest.raises(ValueError, match="fallback_below"):
        WhisperFallback(model, whisper, 1.5)


async def test_the_service_sends_the_unsure_segment_to_whisper(model):
    config = ASRConfig(engine="moonshine", fallback="whisper")
    service = MoonshineSTTService(model, fallback=whisper_fallback(config, model, str(whisper_model_dir())),
                                  audio_passthrough=False)
    clip = recorded_phrase(UNSURE[:1])
    down, _ = await run_test(service, frames_to_send=_segment(clip.audio, 16000),
                             pipeline_params=PipelineParams(audio_in_sample_rate=16000))
    assert [f.text for f in down if isinstance(f, TranscriptionFrame)] == ["Followed by the pound key."]


def test_the_runtime_builds_it_and_refuses_an_unknown_engine(model):
    engines = Engines(load_config(None, ["asr.engine=moonshine", "asr.fallback=whisper"]), "http://127.0.0.1:9", "m",
                      tts_engine=None)  # type: ignore[arg-type]
    stt = engines.make_stt()
    assert isinstance(stt._fallback, WhisperFallback) and stt._fallback.below == 0.55
    assert whisper_fallback(ASRConfig(engine="moonshine"), model, None) is None
    with pytest.raises(ValueError, match="asr.fallback: unknown engine 'parakeet'"):
        whisper_fallback(ASRConfig(engine="moonshine", fallback="parakeet"), model, str(whisper_model_dir()))
