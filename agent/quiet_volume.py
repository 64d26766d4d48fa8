"""pipecat's VAD volume with its BS.1770 measure skipped where it can only read 0.

``VADAnalyzer`` gates speech on the loudness of the last 400 ms (``AudioVolumeTracker``: one ITU-R BS.1770 gating
block through the ``loudness`` C library, ~50 us at 16 kHz), measured again for every 32 ms Silero window of every
call, quiet or not. BS.1770 drops a block quieter than its absolute gate (-70 LKFS), and a window with no block left
measures -inf, which pipecat normalizes to exactly 0.

A block's loudness is ``-0.691 + 10 log10(mean square of the K-weighted block)``. The K-weighting filters start from
rest on the window, so the filtered block's energy is at most the filters' peak power gain times the window's energy
(Parseval: the output's energy over all time bounds its first block's). The peak gain is under 4.4 dB at the rates
Cadence uses (``tests/test_quiet_volume.py`` sweeps it), so a window whose energy bound (with ``GAIN_DB`` = 6 dB)
reads under -70 LKFS measures exactly 0, and this tracker answers 0 without the measure. Any other window is
measured as stock. Digital silence and line noise below ~5 LSB RMS (a caller listening on a quiet line, most of a
call) cost a dot product instead of the filter pass.
"""

from __future__ import annotations

import math

import numpy as np
from pipecat.audio.volume import AudioVolumeTracker

ABSOLUTE_GATE_LKFS = -70.0
GAIN_DB = 6.0  # above the K-weighting's peak power gain (4.3 dB at 8 kHz's Nyquist, less elsewhere)
BLOCK_S = 0.4


def quiet_energy_bound(sample_rate: int) -> float:
    """The int16 sum of squares under which every gating block of a window at this rate is below the gate."""
    block = math.floor(BLOCK_S * sample_rate)
    mean_square = 10 ** ((ABSOLUTE_GATE_LKFS + 0.691 - GAIN_DB) / 10)  # full-scale units
    return mean_square * block * 32768.0**2


class QuietGateVolumeTracker(AudioVolumeTracker):
    """``AudioVolumeTracker`` that reads 0 without measuring a window whose energy cannot pass the absolute gate."""

    def __init__(self) -> None:
        super().__init__()
        self._bound_rate = 0
        self._bound = 0.0
        self.skipped = 0  # windows answered without the measure

    @property
    def volume(self) -> float:
        if self._volume is None:
            if self._sample_rate != self._bound_rate:
                self._bound_rate, self._bound = self._sample_rate, quiet_energy_bound(self._sample_rate)
            samples = np.frombuffer(self._buffer, np.int16).astype(np.float64)
            if float(np.dot(samples, samples)) < self._bound:
                self.skipped += 1
                self._volume = 0.0
                return 0.0
        return super().volume
