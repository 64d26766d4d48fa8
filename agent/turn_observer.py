"""Per-turn stage timestamps from the frames that cross the pipeline.

Times are absolute ``time.monotonic()`` seconds taken from each frame's *push* timestamp
(observers run from a queue, so reading the clock on arrival would add queueing delay).
End of speech is the VAD stop minus the VAD's stop window, i.e. the caller's last voiced audio.
A speculative reply whose audio was held (``llm.speculate_tts``) is seen as the caller got it
(``agent.held_reply_filter``): not at all if it was withdrawn, else its frames at the release at the earliest.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from pipecat.frames.frames import (
    BotStartedSpeakingFrame,
    BotStoppedSpeakingFrame,
    InterruptionFrame,
    LLMFullResponseEndFrame,
    LLMFullResponseStartFrame,
    LLMTextFrame,
    TranscriptionFrame,
    TTSAudioRawFrame,
    TTSStartedFrame,
    TTSStoppedFrame,
    UserStartedSpeakingFrame,
    UserStoppedSpeakingFrame,
    VADUserStoppedSpeakingFrame,
)
from pipecat.observers.base_observer import BaseObserver, FramePushed
from pipecat.transports.base_output import BaseOutputTransport

from agent.held_reply_filter import HeldReplyFilter


@dataclass
class TurnTiming:
    """One caller turn and the bot's answer; None where the stage never happened."""

    index: int
    vad_stop: float | None = None
    vad_stop_secs: float = 0.0
    turn_end: float | None = None
    transcript: float | None = None
    transcript_text: str = ""
    late_transcripts: int = 0
    llm_start: float | None = None
    llm_requests: int = 0  # LLM responses started in this turn (a turn answered twice has 2)
    llm_first_token: float | None = None
    reply_text: str = ""
    tts_start: float | None = None
    tts_first_audio: float | None = None
    first_audio_out: float | None = None
    bot_stopped: float | None = None
    interrupted: bool = False
    llm_done: bool = False
    tts_active: bool = False
    tts_chunk_times: list[float] = field(default_factory=list)

    @property
    def answered(self) -> bool:
        """The reply is complete: the LLM finished, every TTS context closed, the bot went quiet."""
        return self.llm_done and not self.tts_active and self.bot_stopped is not None

    def add_transcript(self, text: str, at: float) -> None:
        """One transcript of this turn (a turn spoken with pauses has one per VAD segment).

        The turn's transcript time is that of the last transcript that reached the LLM request,
        i.e. pushed before the LLM's response started; one pushed after it did not contribute
        (its words missed the request), so it is counted in ``late_transcripts`` and timed by
        nothing. Every stage time is then a difference of ordered events: never negative.

        An empty ``text`` is a segmented ASR's transcript of a segment with no words (a noise the VAD took
        for speech): it carries no words, but it ends that segment's transcription, which the turn end waited
        for, so it times the turn as well (else a later VAD stop would put the end of speech after it).
        """
        if text:
            self.transcript_text = (self.transcript_text + " " + text).strip()
        if self.llm_start is None or at <= self.llm_start:
            self.transcript = at
        elif text:
            self.late_transcripts += 1

    def add_vad_stop(self, at: float, stop_secs: float) -> None:
        """The caller stopped speaking (VAD). Once the LLM request has started, a later stop ends
        speech the request did not contain (talk over the reply that opened no new turn): it does not
        move this turn's end of speech, which would put it after the transcript (a negative stage)."""
        if self.llm_start is not None and self.vad_stop is not None:
            return
        self.vad_stop, self.vad_stop_secs = at, stop_secs

    @property
    def end_of_speech(self) -> float | None:
        return None if self.vad_stop is None else self.vad_stop - self.vad_stop_secs

    def event_times(self) -> dict[str, float]:
        """The turn's events in ``time.monotonic()`` seconds (comparable across processes on one host)."""
        names = ("vad_stop", "turn_end", "transcript", "llm_start", "llm_first_token", "tts_start", "tts_first_audio",
                 "first_audio_out")
        out = {n: round(v, 4) for n in names if (v := getattr(self, n)) is not None}
        if self.end_of_speech is not None:
            out["end_of_speech"] = round(self.end_of_speech, 4)
        return out

    def stages_ms(self, end_of_speech: float | None = None) -> dict[str, float]:
        """Latencies in ms; ``end_of_speech`` may be given exactly (file callers know it)."""
        eos = end_of_speech if end_of_speech is not None else self.end_of_speech
        out: dict[str, float] = {}

        def put(name: str, a: float | None, b: float | None) -> None:
            if a is not None and b is not None:
                out[name] = (b - a) * 1000.0

        # a transcript pushed before the end of speech (a later segment of the turn was silence to the
        # ASR: its final was empty, so the earlier transcript is the newest) was ready at the end of speech
        heard = self.transcript if eos is None or self.transcript is None else max(self.transcript, eos)
        put("eos_to_transcript", eos, heard)
        put("transcript_to_llm_first_token", heard, self.llm_first_token)
        put("llm_first_token_to_tts_first_audio", self.llm_first_token, self.tts_first_audio)
        put("llm_first_token_to_first_clause", self.llm_first_token, self.tts_start)
        put("tts_first_audio_to_audio_out", self.tts_first_audio, self.first_audio_out)
        put("eos_to_llm_first_token", eos, self.llm_first_token)
        put("eos_to_first_audio", eos, self.first_audio_out)
        return out


class TurnObserver(BaseObserver):
    """Builds a ``TurnTiming`` per turn and hands finished ones to ``on_turn``."""

    def __init__(self, on_turn: Callable[[TurnTiming], None] | None = None,
                 on_tts_chunk: Callable[[float], None] | None = None,
                 on_text: Callable[[str, str], None] | None = None):
        """``on_text(kind, text)``: each caller transcript (``heard``) and reply piece (``bot-text``) as it is
        pushed (the page's live feed), from this one observer of the call's frames."""
        super().__init__(observe_every_push=False)
        self.turns: list[TurnTiming] = []
        self._on_turn = on_turn
        self._on_tts_chunk = on_tts_chunk
        self._on_text = on_text
        self._offset_ns: int | None = None
        self._current: TurnTiming | None = None
        self._last_tts_chunk: float | None = None
        self._held_reply = HeldReplyFilter()

    def _abs(self, data: FramePushed) -> float:
        if self._offset_ns is None:
            clock = data.source.get_clock()
            self._offset_ns = int(getattr(clock, "_time", 0))
        return (data.timestamp + self._offset_ns) / 1e9

    def _turn(self) -> TurnTiming:
        if self._current is None:
            self._current = TurnTiming(index=len(self.turns))
            self.turns.append(self._current)
        return self._current

    def _maybe_finish(self) -> None:
        if self._current is not None and self._current.answered:
            self._finish()

    def _finish(self) -> None:
        if self._current is not None and self._on_turn is not None:
            self._on_turn(self._current)
        self._current = None

    async def on_push_frame(self, data: FramePushed):
        for push in self._held_reply.feed(data):
            self._observe(push)

    def _observe(self, data: FramePushed) -> None:
        frame = data.frame
        # User-side frames may open a turn; bot-side frames only fill the open one (late frames
        # of a finished reply must not open a turn that would swallow the caller's next one).
        if isinstance(frame, UserStartedSpeakingFrame):
            if self._current is not None and self._current.llm_start is not None:
                self._current.interrupted = self._current.bot_stopped is None
                self._finish()
            self._turn()
        elif isinstance(frame, VADUserStoppedSpeakingFrame):
            self._turn().add_vad_stop(self._abs(data), float(getattr(frame, "stop_secs", 0.0) or 0.0))
        elif isinstance(frame, UserStoppedSpeakingFrame):
            self._turn().turn_end = self._abs(data)
        elif isinstance(frame, TranscriptionFrame):
            if frame.text.strip():
                self._turn().add_transcript(frame.text, self._abs(data))
                if self._on_text is not None:
                    self._on_text("heard", frame.text.strip())
            elif self._current is not None:  # a segment with no words: no text, but it times the turn
                self._current.add_transcript("", self._abs(data))
        else:
            if self._on_text is not None and isinstance(frame, LLMTextFrame) and frame.text:
                self._on_text("bot-text", frame.text)
            if self._current is not None:
                self._bot_side(self._current, data)

    def _bot_side(self, turn: TurnTiming, data: FramePushed) -> None:
        frame = data.frame
        if turn.llm_start is None and not isinstance(frame, LLMFullResponseStartFrame):
            # Before its own reply starts, a turn takes nothing of the bot's: what comes now is the tail of the
            # previous turn's reply (tokens the caller's new words cut, its last audio, its end), which would
            # time this turn's first token before its transcript.
            return
        if isinstance(frame, TTSAudioRawFrame):
            if isinstance(data.source, BaseOutputTransport):
                return  # the output transport re-pushes what it wrote: count each chunk once
            now = self._abs(data)
            if turn.tts_first_audio is None:
                turn.tts_first_audio = now
            turn.tts_chunk_times.append(now)
            if self._on_tts_chunk is not None and self._last_tts_chunk is not None:
                self._on_tts_chunk(now - self._last_tts_chunk)
            self._last_tts_chunk = now
        elif isinstance(frame, LLMFullResponseStartFrame):
            turn.llm_requests += 1
            if turn.llm_start is None:
                turn.llm_start = self._abs(data)
        elif isinstance(frame, LLMTextFrame):
            if turn.llm_first_token is None:
                turn.llm_first_token = self._abs(data)
            turn.reply_text += frame.text
        elif isinstance(frame, LLMFullResponseEndFrame):
            turn.llm_done = True
            self._maybe_finish()
        elif isinstance(frame, TTSStartedFrame):
            turn.tts_active = True
            turn.bot_stopped = None
            if turn.tts_start is None:
                turn.tts_start = self._abs(data)
        elif isinstance(frame, TTSStoppedFrame):
            turn.tts_active = False
            self._maybe_finish()
        elif isinstance(frame, BotStartedSpeakingFrame):
            turn.bot_stopped = None
            if turn.first_audio_out is None:
                turn.first_audio_out = self._abs(data)
        elif isinstance(frame, BotStoppedSpeakingFrame):
            self._last_tts_chunk = None
            turn.bot_stopped = self._abs(data)
            self._maybe_finish()
        elif isinstance(frame, InterruptionFrame) and turn.llm_start is not None:
            turn.interrupted = True
