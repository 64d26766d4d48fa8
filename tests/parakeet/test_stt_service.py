"""ParakeetSTTService in a pipecat pipeline: interim frames while speaking, one final with TTFB metrics."""

from __future__ import annotations

import asyncio
from dataclasses import replace

import numpy as np
import pytest
from pipecat.frames.frames import (
    InputAudioRawFrame,
    InterimTranscriptionFrame,
    MetricsFrame,
    TranscriptionFrame,
    VADUserStartedSpeakingFrame,
    VADUserStoppedSpeakingFrame,
)
from pipecat.metrics.metrics import TTFBMetricsData
from pipecat.pipeline.worker import PipelineParams
from pipecat.tests.utils import SleepFrame, run_test

from asr.parakeet.batcher import StreamBatcher
from asr.parakeet.engine import ParakeetEngine
from asr.parakeet.streaming import StreamConfig
from asr.parakeet.stt_service import ParakeetSTTService, create_parakeet_stt
from asr.parakeet.tiny import synthetic_speech


@pytest.fixture(scope="module")
def batcher(tiny_dir) -> StreamBatcher:
    return StreamBatcher(ParakeetEngine.from_pretrained(tiny_dir), StreamConfig(chunk_ms=160))


def _audio_frames(clip: np.ndarray, pace_s: float = 0.004) -> list:
    pcm = (np.clip(clip, -1, 1) * 32767).astype(np.int16)
    frames = []
    for lo in range(0, len(pcm), 320):
        frames.append(InputAudioRawFrame(audio=pcm[lo : lo + 320].tobytes(), sample_rate=16000, num_channels=1))
        frames.append(SleepFrame(sleep=pace_s))
    return frames


def _expected_text(batcher: StreamBatcher, clip: np.ndarray) -> str:
    pcm = (np.clip(clip, -1, 1) * 32767).astype(np.int16).astype(np.float32) / 32768.0  # what the service hears
    engine = batcher.engine
    return engine.tokenizer.decode(engine.transcribe_tokens([pcm])[0].tokens).strip()


async def test_interims_then_one_final_with_ttfb(batcher):
    first, second = synthetic_speech(1.6, seed=21), synthetic_speech(1.2, seed=22)
    service = ParakeetSTTService(batcher, preroll_s=0.0, audio_passthrough=False)
    frames = [VADUserStartedSpeakingFrame(), *_audio_frames(first), VADUserStoppedSpeakingFrame(stop_secs=0.2),
              SleepFrame(sleep=0.5),
              VADUserStartedSpeakingFrame(), *_audio_frames(second), VADUserStoppedSpeakingFrame(stop_secs=0.2),
              SleepFrame(sleep=0.5)]
    down, _ = await run_test(service, frames_to_send=frames,
                             pipeline_params=PipelineParams(enable_metrics=True, audio_in_sample_rate=16000))
    finals = [f for f in down if isinstance(f, TranscriptionFrame)]
    assert [f.text for f in finals] == [_expected_text(batcher, first), _expected_text(batcher, second)]
    assert all(f.finalized for f in finals)
    interims = [f for f in down if isinstance(f, InterimTranscriptionFrame)]
    assert interims, "no interim results while speaking"
    assert all(f.result.result.text == f.text and not f.result.result.final for f in interims)
    first_final = down.index(finals[0])
    assert any(isinstance(f, InterimTranscriptionFrame) for f in down[:first_final])
    ttfb = [d.value for f in down if isinstance(f, MetricsFrame) for d in f.data
            if isinstance(d, TTFBMetricsData) and d.value > 0]  # pipecat also reports a 0 at start
    assert len(ttfb) == 2 and all(0.2 <= v < 5 for v in ttfb), ttfb  # from speech end (VAD stop - 0.2 s)


async def test_resamples_8khz_input(batcher, monkeypatch):
    """8 kHz input reaches the engine as the same speech at 16 kHz (nothing dropped or mis-rated), and
    the one final is the engine's transcript of that utterance: not empty, not missing."""
    import soxr
    from pipecat.audio.utils import create_stream_resampler

    clip = synthetic_speech(1.6, seed=31)
    narrow = soxr.resample(clip, 16000, 8000).astype(np.float32)
    pcm = (np.clip(narrow, -1, 1) * 32767).astype(np.int16)
    chunks = [pcm[lo : lo + 160].tobytes() for lo in range(0, len(pcm), 160)]
    resampler = create_stream_resampler()  # what the service uses: its output, up to its rounding
    wide = np.frombuffer(b"".join([await resampler.resample(c, 8000, 16000) for c in chunks]), dtype=np.int16)

    fed: list[np.ndarray] = []
    feed = batcher.feed
    monkeypatch.setattr(batcher, "feed", lambda session, samples: (fed.append(samples.copy()), feed(session, samples)))
    frames = [VADUserStartedSpeakingFrame()]
    for chunk in chunks:
        frames += [InputAudioRawFrame(audio=chunk, sample_rate=8000, num_channels=1), SleepFrame(sleep=0.002)]
    frames += [VADUserStoppedSpeakingFrame(stop_secs=0.2), SleepFrame(sleep=0.5)]
    service = ParakeetSTTService(batcher, preroll_s=0.0, audio_passthrough=False)
    down, _ = await run_test(service, frames_to_send=frames, pipeline_params=PipelineParams(audio_in_sample_rate=8000))

    heard = np.concatenate(fed)
    assert len(heard) == len(wide)  # 16 kHz: twice the samples sent, less the resampler's held-back tail
    assert np.abs(heard * 32768.0 - wide).max() <= 3  # the same waveform (chunking moves an LSB or two)
    engine = batcher.engine
    expected = engine.tokenizer.decode(engine.transcribe_tokens([heard])[0].tokens).strip()
    assert expected, "the tiny model says nothing for this clip: pick one it transcribes"
    finals = [f.text for f in down if isinstance(f, TranscriptionFrame)]
    assert finals == [expected]


def test_factory_shares_one_batcher(tiny_dir):
    from agent.config import ASRConfig

    config = ASRConfig(engine="parakeet", model=str(tiny_dir))
    a, b = create_parakeet_stt(config), create_parakeet_stt(config)
    assert isinstance(a, ParakeetSTTService) and a._batcher is b._batcher
    assert a._batcher.config.chunk_frames == 2 and a._batcher.config.left_frames == 125


async def test_interims_carry_the_partial_and_mark_it_stable_once_unchanged(batcher):
    """The stability hook: a partial whose text held for ``stable_partials`` partials goes out again,
    marked stable (once per text); a repeat before that, or after, is not pushed."""
    from asr.parakeet.stt_service import ParakeetPartial, _Interim

    clip = synthetic_speech(2.0, seed=23)
    results: list = []
    session = batcher.open(on_partial=results.append)
    batcher.feed(session, clip)
    while batcher.pending(session):
        await asyncio.sleep(0.001)
    batcher.close(session)
    assert results and results[-1].text
    service = ParakeetSTTService(batcher, preroll_s=0.0, stable_partials=3)
    pushed: list = []

    async def capture(frame, direction=None):  # what the service would hand to the next processor
        pushed.append(frame)

    service.push_frame = capture
    service._utterance = 1
    same, other = results[-1], replace(results[-1], text=results[-1].text + " more")
    for result in (same, same, same, same, other, other, same):
        await service._push_interim(_Interim(1, result))
    assert all(isinstance(f, InterimTranscriptionFrame) and isinstance(f.result, ParakeetPartial) for f in pushed)
    assert [(f.text, f.result.repeats, f.result.stable) for f in pushed] == [
        (same.text, 1, False), (same.text, 3, True), (other.text, 1, False), (same.text, 1, False)]
    assert pushed[1].result.result is same
    await service._push_interim(_Interim(0, same))  # an utterance already final: dropped
    assert len(pushed) == 4
