"""The VAD stage marks the start of its stop window and a caller who goes on inside it (``CallerPauseFrame``), on a
recorded sentence whose pause after an unfinished clause is shorter than the window (agent.timed_vad)."""

from __future__ import annotations

import numpy as np
import pytest
from pipecat.frames.frames import (
    Frame,
    InputAudioRawFrame,
    VADUserStartedSpeakingFrame,
    VADUserStoppedSpeakingFrame,
)
from pipecat.pipeline.pipeline import Pipeline
from pipecat.pipeline.worker import PipelineParams
from pipecat.tests.utils import SleepFrame, run_test

from agent.config import Config
from agent.pipeline import make_vad, make_vad_processor
from agent.timed_vad import TimedVADProcessor
from asr.pause import CallerPauseFrame
from testkit.corpus import pick
from testkit.talk_clips import stretch_pause
from transports.audio_io import load_audio

RATE = 16000


def _sentence_with_a_short_pause() -> np.ndarray:
    """"To leave a message, | please enter a mailbox number." with 0.12 s of quiet at the comma (the VAD stops
    after 0.2 s), then a second of quiet."""
    prompts = pick(["vm-whichbox"])
    if not prompts:
        pytest.skip("needs asterisk-core-sounds-en-wav (installed by scripts/install.sh)")
    audio = stretch_pause(load_audio(prompts[0].path, RATE), 1.11, RATE, pause_s=0.12)
    return np.concatenate([audio, np.zeros(RATE, np.float32)])


def _frames(audio: np.ndarray) -> list[Frame]:
    pcm = (np.clip(audio, -1, 1) * 32767).astype(np.int16)
    out: list[Frame] = []
    for lo in range(0, len(pcm), 640):  # 40 ms, as the phone line hands them on
        out += [InputAudioRawFrame(audio=pcm[lo:lo + 640].tobytes(), sample_rate=RATE, num_channels=1),
                SleepFrame(sleep=0.002)]
    return out


async def _events(pause_frames: bool) -> list[str]:
    vad = TimedVADProcessor(vad_analyzer=make_vad(Config()), on_lag=lambda _ms: None, pause_frames=pause_frames)
    down, _ = await run_test(Pipeline([vad]), frames_to_send=_frames(_sentence_with_a_short_pause()),
                             pipeline_params=PipelineParams(audio_in_sample_rate=RATE))
    names = {VADUserStartedSpeakingFrame: "start", VADUserStoppedSpeakingFrame: "stop"}
    out = []
    for f in down:
        if isinstance(f, CallerPauseFrame):
            out.append("quiet" if f.quiet else "resumed")
        elif type(f) in names:
            out.append(names[type(f)])
    return out


async def test_a_short_pause_is_marked_and_the_last_quiet_comes_before_the_stop():
    events = await _events(pause_frames=True)
    assert events[0] == "start" and events.count("start") == 1 and events.count("stop") == 1, events
    assert events[-2:] == ["quiet", "stop"], events
    # the pause at the comma: the window began, then the caller went on before it ran out
    assert "resumed" in events and events.index("quiet") < events.index("resumed"), events
    # every pause is marked once: they alternate
    marks = [e for e in events if e in ("quiet", "resumed")]
    assert all(a != b for a, b in zip(marks, marks[1:], strict=False)), events


async def test_without_the_quiet_trigger_the_vad_stage_is_stock():
    assert await _events(pause_frames=False) == ["start", "stop"]
    config = Config()
    config.asr.engine, config.llm.speculate = "parakeet", "final,quiet"
    assert make_vad_processor(config)._pause_frames
    config.llm.speculate = "final"
    assert not make_vad_processor(config)._pause_frames
    config.asr.engine, config.llm.speculate = "moonshine", "final,quiet"  # no partials to ask for
    assert not make_vad_processor(config)._pause_frames
