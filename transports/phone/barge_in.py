"""Fast barge-in: notice the caller speaking over the bot well inside 200 ms.

The pipeline's VAD needs ``vad.start_secs`` (0.2 s) of speech before it starts a user turn, and
Silero itself is 50-250 ms late on soft onsets ("hello"); measured on the Asterisk prompts, that
path clears the caller's playout 220-350 ms after speech begins. This detector is an energy
onset on the caller's 8 kHz audio: ``start_ms`` of consecutive 20 ms chunks louder than both an
absolute floor and a tracked noise floor plus ``snr_db`` (``transports.audio_level.LoudnessGate``). It is only a trigger: the transport
clears the caller's playout and *holds* the bot's audio; the pipeline's own turn logic confirms
the interruption, and if it does not (a cough, a door) playback resumes after the hold.
"""

from __future__ import annotations

from transports.audio_level import LoudnessGate


class BargeInDetector:
    """Edge-triggered speech onset; ``onset`` is the estimated start of the triggering speech."""

    def __init__(self, start_ms: float = 60.0, min_level_dbfs: float = -40.0, snr_db: float = 12.0,
                 floor_rise_db_per_s: float = 3.0, chunk_s: float = 0.02):
        self.start_chunks = max(1, round(start_ms / 1000.0 / chunk_s))
        self.gate = LoudnessGate(min_level_dbfs, snr_db, floor_rise_db_per_s)
        self._chunk_s = chunk_s
        self._run = 0
        self._run_start: float | None = None
        self.onset: float | None = None

    @property
    def noise_floor(self) -> float:
        return self.gate.noise_floor

    def threshold(self) -> float:
        return self.gate.threshold()

    def feed(self, pcm8k: bytes, arrived_at: float) -> bool:
        """Analyse one chunk that arrived at ``arrived_at``; True exactly when an onset is confirmed."""
        if not self.gate.loud(pcm8k, self._chunk_s):
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
