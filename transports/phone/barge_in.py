"""Fast barge-in: notice the caller speaking over the bot well inside 200 ms.

The pipeline's VAD needs ``vad.start_secs`` (0.2 s) of speech before it starts a user turn, and
Silero itself is 50-250 ms late on soft onsets ("hello"); measured on the Asterisk prompts, that
path clears the caller's playout 220-350 ms after speech begins. This detector is an energy
onset on the caller's 8 kHz audio: ``start_ms`` of consecutive 20 ms chunks louder than both an
absolute floor and a tracked noise floor plus ``snr_db``. It is only a trigger: the transport
clears the caller's playout and *holds* the bot's audio; the pipeline's own turn logic confirms
the interruption, and if it does not (a cough, a door) playback resumes after the hold.
"""

from __future__ import annotations

import audioop
import math


def level_dbfs(pcm16: bytes) -> float:
    """RMS level of 16-bit PCM in dB relative to full scale (-120 for digital silence)."""
    rms = audioop.rms(pcm16, 2)
    return 20.0 * math.log10(rms / 32768.0) if rms > 0 else -120.0


class BargeInDetector:
    """Edge-triggered speech onset; ``onset`` is the estimated start of the triggering speech."""

    def __init__(self, start_ms: float = 60.0, min_level_dbfs: float = -40.0, snr_db: float = 12.0,
                 floor_rise_db_per_s: float = 3.0, chunk_s: float = 0.02):
        self.start_chunks = max(1, round(start_ms / 1000.0 / chunk_s))
        self.min_level_dbfs = min_level_dbfs
        self.snr_db = snr_db
        self._rise = floor_rise_db_per_s * chunk_s
        self._chunk_s = chunk_s
        self.noise_floor = -120.0
        self._run = 0
        self._run_start: float | None = None
        self.onset: float | None = None

    def threshold(self) -> float:
        return max(self.min_level_dbfs, self.noise_floor + self.snr_db)

    def feed(self, pcm8k: bytes, arrived_at: float) -> bool:
        """Analyse one chunk that arrived at ``arrived_at``; True exactly when an onset is confirmed."""
        level = level_dbfs(pcm8k)
        loud = level >= self.threshold()
        # Minimum tracking: the floor drops at once to quieter audio and creeps up slowly, so
        # steady line noise raises it and speech (short, loud) barely moves it.
        self.noise_floor = level if level < self.noise_floor else min(level, self.noise_floor + self._rise)
        if not loud:
            self._run, self._run_start = 0, None
            return False
        self._run += 1
        if self._run == 1:
            duration = len(pcm8k) / 2 / 8000.0
            self._run_start = arrived_at - duration  # the chunk's audio began one chunk earlier
        if self._run == self.start_chunks:
            self.onset = self._run_start
            return True
        return False
