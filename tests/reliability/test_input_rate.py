"""Finding 7 for WebRTC: a peer sending audio far faster than real time must not flood the ASR.

The phone line caps its media itself (``test_overload.py``); WebRTC sessions get ``InputRateLimiter``
(aiortc hands RTP over as fast as it arrives). Before, every frame went on to the ASR.
"""

from __future__ import annotations

from pipecat.frames.frames import InputAudioRawFrame
from pipecat.tests.utils import run_test

from transports.input_rate import InputRateLimiter, RealTimeBudget

FRAME_S = 0.02
RATE = 16000


def audio_frame() -> InputAudioRawFrame:
    return InputAudioRawFrame(audio=b"\x01\x00" * int(RATE * FRAME_S), sample_rate=RATE, num_channels=1)


async def test_a_burst_far_beyond_real_time_is_cut_to_the_allowance():
    limiter = InputRateLimiter(ratio=1.5, burst_s=2.0)
    sent = 400  # 8 s of audio at once: ~160x real time
    down, _ = await run_test(limiter, frames_to_send=[audio_frame() for _ in range(sent)])
    passed = sum(isinstance(f, InputAudioRawFrame) for f in down)
    assert 2.0 / FRAME_S - 1 <= passed <= 2.0 / FRAME_S + 10, passed  # the burst allowance, then nothing
    assert abs(limiter.dropped_s - (sent - passed) * FRAME_S) < 1e-6


def test_real_time_audio_is_never_dropped_and_the_bucket_refills():
    budget = RealTimeBudget(ratio=1.5, burst_s=2.0, now=0.0)
    now = 0.0
    for _ in range(3000):  # 60 s of real-time frames
        now += FRAME_S
        assert budget.take(FRAME_S, now)
    drained = sum(budget.take(FRAME_S, now) for _ in range(200))  # a burst on top: the allowance only
    assert 97 <= drained <= 100  # ~2 s of allowance, less the frame just taken
    assert not budget.take(FRAME_S, now)
    assert budget.take(FRAME_S, now + 1.0)  # refilled at 1.5x wall time
