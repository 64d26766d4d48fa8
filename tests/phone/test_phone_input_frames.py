"""``phone.input_frame_ms``: the caller's 20 ms media messages enter the pipeline as longer frames, none lost."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import pytest
from pipecat.frames.frames import Frame, InputAudioRawFrame
from pipecat.processors.frame_processor import FrameDirection, FrameProcessor

from testkit.phone_prompts import pcm8k
from tests.phone.parrot import phone_server, run_pipeline
from transports.phone.loopback_caller import LoopbackCaller
from transports.phone.options import PhoneOptions
from transports.phone.transport import PhoneTransport


class AudioRecorder(FrameProcessor):
    def __init__(self) -> None:
        super().__init__()
        self.frames: list[bytes] = []

    async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
        await super().process_frame(frame, direction)
        if isinstance(frame, InputAudioRawFrame):
            self.frames.append(frame.audio)
        await self.push_frame(frame, direction)


async def record_call(options: PhoneOptions, prompt: str) -> tuple[list[bytes], int]:
    """Input audio frames the pipeline saw while a caller said ``prompt``, and the media messages it sent."""
    recorder = AudioRecorder()

    async def run_call(transport: PhoneTransport, _sid: str, observers: Sequence[Any]) -> None:
        await run_pipeline(transport, [recorder], observers)

    async with phone_server(run_call, options=options, barge_in=False) as (url, endpoint):
        caller = await LoopbackCaller(url).connect()
        await caller.say(pcm8k(prompt))
        await asyncio.sleep(0.3)
        await caller.hang_up()
        await asyncio.sleep(0.2)
        assert endpoint.recent, "the call was not recorded"
        sent = endpoint.recent[-1].stats.as_dict()["media_in"]
    return recorder.frames, sent


@pytest.mark.parametrize("frame_ms", [20.0, 40.0, 60.0])
async def test_caller_audio_enters_in_frames_of_the_configured_length_and_none_is_lost(frame_ms: float) -> None:
    frames, media = await record_call(PhoneOptions(input_frame_ms=frame_ms), "auth-thankyou")
    per_message = 2 * 16000 * 20 // 1000  # one 20 ms mu-law message, decoded to 16 kHz PCM
    want = 2 * int(16000 * frame_ms / 1000)
    assert frames, "no caller audio reached the pipeline"
    assert {len(f) for f in frames} == {want}, sorted({len(f) for f in frames})
    # every message's audio is in a frame but for the last, shorter-than-a-frame remainder
    assert media * per_message - want < sum(map(len, frames)) <= media * per_message
