"""Hold a turn end until the caller has been quiet for ``min_quiet_secs`` after their last voiced audio.

A fast segmented ASR (Moonshine: ~0.1 s a segment) has the VAD segment's final transcript in hand ~0.3 s
after the caller's last voiced sample, and smart-turn calls a finished sentence complete, so the turn used
to end inside the short pause (0.30-0.32 s on the recorded ``ss-noservice`` and ``pbx-invalid``) between two
sentences of one utterance: the caller got two replies. Whisper's slow pass (~0.5 s) had covered the pause.

Mixed in first (before the speculation mixin), this intercepts every way the wrapped strategy ends a turn
(``trigger_user_turn_stopped``: smart-turn's verdict, the finished-sentence rule, the silence fallback) and
lets it through only once the quiet is confirmed, on the audio frame that confirms it. Meanwhile the turn
stays open, so the speculation mixin requests the reply on the final transcript at once (``llm.speculate =
"final"``): the reply is generated during the wait and released at confirmation. When the caller resumes
first, the VAD start drops the held end and withdraws the speculative reply; the next segment's transcript
joins the same turn, whose end then answers both sentences once.

A pause after a hanging thought is more likely mid-sentence ("To leave a message, | please enter a mailbox
number."): while the turn's newest final transcript reads unfinished (``agent.sentence_end.reads_unfinished``),
the end needs ``unfinished_quiet_secs`` of quiet instead. The audio turn model often calls such a pause
complete (smart-turn v3 gives the recorded "To leave a message," 0.65), and a fast ASR punctuates the clause as
a sentence, so without this the caller's resumption came after the reply's first audio.

Quiet is counted in audio, not wall time, from the caller's last voiced 20 ms frame: one whose level is
within ``VOICED_BELOW_PEAK_DB`` of the turn's loudest frame and over a tracked noise floor
(``transports.audio_level.LoudnessGate``), the rule ``testkit.voiced`` gives the latency benchmarks' clock.
While the VAD hears speech it is not quiet at all. The level catches a resumption on its first loud frame,
where the VAD confirms speech only after ``vad.start_secs`` and its volume smoothing (~0.11-0.16 s later),
and it dates the end of speech ~0.1 s earlier than the VAD stop does (Silero holds on to a word's fading
tail). A loud frame that is not speech (a click, a noise burst: no VAD start follows) holds the end at most
until the VAD has counted ``min_quiet_secs + ONSET_GUARD_S`` of quiet.
"""

from __future__ import annotations

from loguru import logger
from pipecat.frames.frames import (
    Frame,
    InputAudioRawFrame,
    TranscriptionFrame,
    VADUserStartedSpeakingFrame,
    VADUserStoppedSpeakingFrame,
)
from pipecat.turns.types import ProcessFrameResult

from agent.sentence_end import reads_unfinished
from transports.audio_level import SILENCE_DBFS, LoudnessGate, level_dbfs

# Longest a loud frame without a VAD start can hold a turn end past min_quiet_secs: a real resumption has
# its VAD start by then (start_secs 0.1 s of 32 ms windows plus the volume smoothing: ~0.11-0.16 s).
ONSET_GUARD_S = 0.2
VOICED_BELOW_PEAK_DB = 35.0  # a frame this far under the turn's loudest is not voiced (testkit.voiced's rule)
FLOOR_DBFS = -55.0  # ... nor one under this, whatever the peak


class QuietTurnEndMixin:
    """Turn ends wait for ``min_quiet_secs`` of quiet audio; put it first in a stop strategy's bases."""

    def __init__(self, *args, min_quiet_secs: float | None = None, unfinished_quiet_secs: float | None = None,
                 **kwargs):
        """``min_quiet_secs``: quiet after the last voiced audio a turn end needs; None or <= 0: none.
        ``unfinished_quiet_secs``: the quiet needed instead while the newest transcript reads unfinished (used
        only when longer than ``min_quiet_secs``; None: the same)."""
        super().__init__(*args, **kwargs)
        self._min_quiet = min_quiet_secs if min_quiet_secs and min_quiet_secs > 0 else None
        self._unfinished_quiet = (unfinished_quiet_secs if self._min_quiet is not None and unfinished_quiet_secs
                                  and unfinished_quiet_secs > self._min_quiet else None)
        self._text_hangs = False  # the turn's newest final transcript reads unfinished
        self._level = LoudnessGate(min_level_dbfs=FLOOR_DBFS)
        self._peak_dbfs = SILENCE_DBFS  # the loudest frame the VAD called speech in this turn
        self._since_loud = 0.0  # audio seconds since the last loud frame
        self._since_vad: float | None = None  # audio seconds of quiet by the VAD; None while it hears speech
        self._held: tuple[bool | None] | None = None  # a held turn end (its enable_user_speaking_frames)
        self.held_ends = 0  # turn ends that waited for the quiet (tests, diagnosis)
        self.resumed_while_held = 0  # ... and were dropped because the caller went on
        self.held_for_unfinished_text = 0  # turn ends that needed the longer quiet (tests, diagnosis)

    @property
    def quiet_s(self) -> float | None:
        """Audio seconds since the caller's last voiced frame (None while the VAD hears speech)."""
        return None if self._since_vad is None else self._since_loud

    @property
    def required_quiet_s(self) -> float | None:
        """The quiet the turn end needs now (None: none)."""
        if self._text_hangs and self._unfinished_quiet is not None:
            return self._unfinished_quiet
        return self._min_quiet

    def _quiet_enough(self) -> bool:
        need = self.required_quiet_s
        if need is None:
            return True
        if self._since_vad is None:
            return False
        return self._since_loud >= need or self._since_vad >= need + ONSET_GUARD_S

    def _listen(self, frame: InputAudioRawFrame) -> None:
        seconds = len(frame.audio) / 2 / frame.num_channels / frame.sample_rate
        level = level_dbfs(frame.audio)  # once per frame: the peak and the gate share it
        if self._since_vad is None:  # the VAD hears speech: the turn's level
            self._peak_dbfs = max(self._peak_dbfs, level)
            self._level.min_level_dbfs = max(FLOOR_DBFS, self._peak_dbfs - VOICED_BELOW_PEAK_DB)
        else:
            self._since_vad += seconds
        self._since_loud = 0.0 if self._level.loud_level(level, seconds) else self._since_loud + seconds

    async def process_frame(self, frame: Frame) -> ProcessFrameResult:
        if isinstance(frame, InputAudioRawFrame) and frame.audio:
            if self._min_quiet is not None:  # off: no per-frame work
                self._listen(frame)
        elif isinstance(frame, VADUserStartedSpeakingFrame):
            self._since_vad = None
            if self._held is not None:
                self._held = None
                self.resumed_while_held += 1
                logger.debug(f"{self}: caller went on before the quiet was confirmed: turn end dropped")
        elif isinstance(frame, VADUserStoppedSpeakingFrame):
            self._since_vad = float(frame.stop_secs or 0.0)
        elif isinstance(frame, TranscriptionFrame) and frame.text.strip() and self._unfinished_quiet is not None:
            self._text_hangs = reads_unfinished(frame.text)
        result = await super().process_frame(frame)
        if isinstance(frame, InputAudioRawFrame) and self._held is not None and self._quiet_enough():
            (enable,), self._held = self._held, None
            logger.debug(f"{self}: {self.quiet_s:.2f} s quiet: the held turn end goes through")
            await super().trigger_user_turn_stopped(enable_user_speaking_frames=enable)
        return result

    async def trigger_user_turn_stopped(self, *, enable_user_speaking_frames: bool | None = None):
        if self._quiet_enough():
            self._held = None
            await super().trigger_user_turn_stopped(enable_user_speaking_frames=enable_user_speaking_frames)
            return
        if self._held is None:
            self.held_ends += 1
            self.held_for_unfinished_text += int(self.required_quiet_s != self._min_quiet)
            logger.debug(f"{self}: turn end held until {self.required_quiet_s:.2f} s of quiet (now {self.quiet_s})")
        self._held = (enable_user_speaking_frames,)

    async def handle_user_turn_started(self):
        self._held = None
        self._text_hangs = False
        self._peak_dbfs = SILENCE_DBFS
        self._level.min_level_dbfs = FLOOR_DBFS
        await super().handle_user_turn_started()

    async def handle_user_turn_stopped(self):
        self._held = None
        self._text_hangs = False
        await super().handle_user_turn_stopped()
