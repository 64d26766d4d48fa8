"""Start transcribing at the first quiet moment, before the VAD is sure the caller stopped.

The turn VAD reports the end of speech only after ``vad.stop_secs`` of silence (plus volume
smoothing). A segmented ASR that starts only then adds its whole run time on top. This tracker
watches the raw level of the caller's audio while they speak: after ``quiet_ms`` of audio well
under the utterance's peak, it names the buffer position to transcribe speculatively. When the
VAD stop arrives, the speculation is used only if nothing louder than that quiet threshold came
after it, so no word can be missing from it; otherwise the normal full pass runs.
"""

from __future__ import annotations

from transports.audio_level import level_dbfs


class EagerSegment:
    """Per-utterance state: the speculative cut position and whether speech resumed after it."""

    def __init__(self, quiet_ms: float = 120.0, floor_dbfs: float = -40.0, below_peak_db: float = 30.0):
        self.quiet_s = quiet_ms / 1000.0
        self.floor_dbfs = floor_dbfs
        self.below_peak_db = below_peak_db
        self.reset()

    def reset(self) -> None:
        self._peak = -120.0
        self._quiet_run = 0.0
        self.position: int | None = None
        self._resumed = False

    def observe(self, pcm16: bytes, sample_rate: int, buffer_len: int) -> int | None:
        """Feed one chunk (already appended to a buffer now ``buffer_len`` bytes long).

        Returns the byte position to transcribe up to when a new speculation should start.
        """
        level = level_dbfs(pcm16)
        quiet = level < min(self.floor_dbfs, self._peak - self.below_peak_db)
        if not quiet:
            self._peak = max(self._peak, level)
            self._quiet_run = 0.0
            if self.position is not None:
                self._resumed = True
            return None
        self._quiet_run += len(pcm16) / 2 / sample_rate
        if self._quiet_run >= self.quiet_s and (self.position is None or self._resumed):
            self.position, self._resumed = buffer_len, False
            return buffer_len
        return None

    def not_started(self) -> None:
        """The proposed cut could not be transcribed (a pass was still running): forget it.

        Until a later cut is taken, ``usable`` is None, so a pass over an earlier, shorter
        buffer is never mistaken for one covering this cut (that lost the utterance's end).
        """
        self._resumed = True

    def usable(self) -> int | None:
        """The speculated position if nothing audible followed it, else None."""
        return None if self.position is None or self._resumed else self.position
