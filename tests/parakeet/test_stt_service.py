"""ParakeetSTTService in a pipecat pipeline: interim frames while speaking, one final with TTFB metrics."""

from __future__ import annotations

import asyncio
from dataclasses import replace

import numpy as np
import pytest
import torch
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


@pytest.fixture(scope="module")
def phone_band_batcher() -> StreamBatcher:
    """The reference model (decision margins of several logits) deaf above 3.4 kHz: its transcript of
    speech depends on the speech, not on what a resampler leaves above 4 kHz."""
    from asr.parakeet.tiny import build_reference_model, checkpoint

    model = build_reference_model(seed=0, band_hz=3400.0)
    return StreamBatcher(ParakeetEngine(checkpoint(model)), StreamConfig(chunk_ms=160))


async def _finals(batcher: StreamBatcher, pcm: np.ndarray, rate: int, fed: list[np.ndarray]) -> list:
    """One utterance of ``pcm`` (int16 at ``rate``) in 20 ms frames through the service: its finals."""
    step = rate // 50
    frames = [VADUserStartedSpeakingFrame()]
    for lo in range(0, len(pcm), step):
        frames += [InputAudioRawFrame(audio=pcm[lo : lo + step].tobytes(), sample_rate=rate, num_channels=1),
                   SleepFrame(sleep=0.002)]
    frames += [VADUserStoppedSpeakingFrame(stop_secs=0.2), SleepFrame(sleep=0.5)]
    fed.clear()
    service = ParakeetSTTService(batcher, preroll_s=0.0, audio_passthrough=False)
    down, _ = await run_test(service, frames_to_send=frames, pipeline_params=PipelineParams(audio_in_sample_rate=rate))
    return [f.result for f in down if isinstance(f, TranscriptionFrame)]


async def test_8khz_input_gets_the_transcript_of_the_same_speech_at_16khz(phone_band_batcher, monkeypatch):
    """A phone caller (8 kHz) gets the transcript a 16 kHz caller gets for the same speech: same
    tokens at the same frames, not empty. The clip's decisions are checked to have no near tie,
    so a faithful resampling cannot change them, and audio at the wrong rate does change them."""
    import soxr

    from asr.parakeet.decoding.label_looping import LabelLoopingDecoder
    from asr.parakeet.margins import trace_decode
    from asr.parakeet.tiny import _encoder_hidden, block_speech

    batcher, engine = phone_band_batcher, phone_band_batcher.engine
    clip = block_speech(4.0, seed=704)[0]
    wide = (np.clip(clip, -1, 1) * 32767).astype(np.int16)
    narrow = (np.clip(soxr.resample(clip, 16000, 8000), -1, 1) * 32767).astype(np.int16)
    model = engine.checkpoint.model
    hidden, frames = _encoder_hidden(model, [wide.astype(np.float32) / 32768.0])
    with torch.inference_mode():
        _, decisions = trace_decode(LabelLoopingDecoder.from_model(model), model.encoder_projector(hidden),
                                    frames.tolist())
    assert min(d.margin for d in decisions[0]) >= 1.0, "a near tie in this clip: pick another seed"

    fed: list[np.ndarray] = []
    feed = batcher.feed
    monkeypatch.setattr(batcher, "feed", lambda session, samples: (fed.append(samples.copy()), feed(session, samples)))
    at_16k = await _finals(batcher, wide, 16000, fed)
    at_8k = await _finals(batcher, narrow, 8000, fed)
    heard = np.concatenate(fed)

    assert len(at_16k) == 1 and len(at_16k[0].tokens) >= 10, [r.text for r in at_16k]
    offline = engine.transcribe_tokens([wide.astype(np.float32) / 32768.0])[0]
    assert (at_16k[0].tokens, at_16k[0].frames) == (offline.tokens, offline.frames)
    assert len(at_8k) == 1, "one utterance at 8 kHz, one final"
    assert at_8k[0].text == at_16k[0].text
    assert (at_8k[0].tokens, at_8k[0].frames, at_8k[0].durations) == (
        at_16k[0].tokens, at_16k[0].frames, at_16k[0].durations)
    assert 0 <= 2 * len(narrow) - len(heard) <= 400, (len(heard), len(narrow))  # 16 kHz less the resampler's tail
    # The check can fail: the same 8 kHz samples taken for 16 kHz ones (no resampling) are other speech.
    unresampled = engine.transcribe_tokens([narrow.astype(np.float32) / 32768.0])[0]
    assert unresampled.tokens != at_16k[0].tokens


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


async def test_an_utterance_with_no_words_gets_one_empty_final():
    """A model that hears no words (blank always wins) still gives the utterance its one final, empty: the stop
    strategy ends such a turn on it (``agent.finished_text_stop``) instead of pipecat's 5 s stop timeout."""
    from asr.parakeet.tiny import build_reference_model, checkpoint

    model = build_reference_model(seed=0)
    with torch.no_grad():
        model.joint.head.bias[model.config.blank_token_id] = 1e4
    deaf = StreamBatcher(ParakeetEngine(checkpoint(model)), StreamConfig(chunk_ms=160))
    service = ParakeetSTTService(deaf, preroll_s=0.0, audio_passthrough=False)
    frames = [VADUserStartedSpeakingFrame(), *_audio_frames(synthetic_speech(1.2, seed=23)),
              VADUserStoppedSpeakingFrame(stop_secs=0.2), SleepFrame(sleep=0.5)]
    down, _ = await run_test(service, frames_to_send=frames, pipeline_params=PipelineParams(audio_in_sample_rate=16000))
    finals = [f for f in down if isinstance(f, TranscriptionFrame)]
    assert [(f.text, f.finalized) for f in finals] == [("", True)]
    assert finals[0].result is not None and finals[0].result.audio_s > 1.0
    assert not [f for f in down if isinstance(f, InterimTranscriptionFrame)]
