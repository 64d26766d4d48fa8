"""The depth of aiortc's receive jitter buffer for the caller's audio.

aiortc releases an audio frame only once ``prefetch`` later frames have arrived: 4 by default, so
every caller's voice reaches the pipeline 80 ms (four 20 ms Opus frames) after it arrived, and the
end of a turn is detected 80 ms late. The buffer does not time-align packets (it only reorders
within its window), so a shallower one costs only packets that arrive later than their successors.
"""

from __future__ import annotations

from typing import Any

AIORTC_AUDIO_PREFETCH = 4
CAPACITY = 16


def check_prefetch(frames: int) -> int:
    if not 1 <= frames <= CAPACITY // 2:
        raise ValueError(f"session.webrtc_jitter_frames must be 1..{CAPACITY // 2}, got {frames}")
    return frames


def set_audio_prefetch(pc: Any, frames: int) -> int:
    """Give every audio receiver of ``pc`` a jitter buffer releasing a frame after ``frames`` later
    ones (at least 1); returns how many receivers were changed. Call it before media flows."""
    from aiortc.jitterbuffer import JitterBuffer

    check_prefetch(frames)
    changed = 0
    for transceiver in pc.getTransceivers():
        receiver = transceiver.receiver
        if transceiver.kind == "audio" and receiver is not None and hasattr(receiver, "_RTCRtpReceiver__jitter_buffer"):
            receiver._RTCRtpReceiver__jitter_buffer = JitterBuffer(capacity=CAPACITY, prefetch=frames)
            changed += 1
    return changed
