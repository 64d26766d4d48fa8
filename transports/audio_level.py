"""The level of 16-bit PCM and the energy-onset rule both barge-in detectors share.

A chunk is *loud* when its RMS level is over an absolute floor and over a tracked noise floor
plus ``snr_db``. The noise floor follows the minimum: it drops at once to quieter audio and
creeps up slowly (``floor_rise_db_per_s``), so steady line noise raises it while speech (short,
loud) barely moves it. The browser/WebRTC stage (``agent.fast_barge_in``), the phone transport
(``transports.phone.barge_in``) and the eager Whisper segmenter (``asr.eager_segment``) use it.
"""

from __future__ import annotations

import audioop
import math

SILENCE_DBFS = -120.0


def level_dbfs(pcm16: bytes) -> float:
    """RMS level of 16-bit PCM in dB relative to full scale (-120 for digital silence)."""
    rms = audioop.rms(pcm16, 2)
    return 20.0 * math.log10(rms / 32768.0) if rms > 0 else SILENCE_DBFS


class LoudnessGate:
    """Loud-or-not per chunk over a minimum-tracking noise floor."""

    def __init__(self, min_level_dbfs: float = -40.0, snr_db: float = 12.0, floor_rise_db_per_s: float = 3.0):
        self.min_level_dbfs = min_level_dbfs
        self.snr_db = snr_db
        self.floor_rise_db_per_s = floor_rise_db_per_s
        self.noise_floor = SILENCE_DBFS

    def threshold(self) -> float:
        return max(self.min_level_dbfs, self.noise_floor + self.snr_db)

    def loud(self, pcm16: bytes, seconds: float) -> bool:
        """Whether this chunk (``seconds`` long) is over the threshold; then let the floor follow it."""
        return self.loud_level(level_dbfs(pcm16), seconds)

    def loud_level(self, level: float, seconds: float) -> bool:
        """``loud`` for a chunk whose level (dBFS) the caller already measured."""
        loud = level >= self.threshold()
        rise = self.floor_rise_db_per_s * seconds
        self.noise_floor = level if level < self.noise_floor else min(level, self.noise_floor + rise)
        return loud
