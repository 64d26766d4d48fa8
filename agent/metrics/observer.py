"""The per-session pipecat observer that feeds the shared stage histograms.

Times come from each frame's push timestamp (observers run from a queue). A user turn starts
at ``UserStartedSpeakingFrame``; within it each stage is taken once and only after the one
before it, so stragglers of an earlier reply can never be read as this turn's answer:

- ``asr_final``: last VAD stop (minus the VAD's stop window) -> first transcript after it;
- ``turn_end``: end of speech -> ``UserStoppedSpeakingFrame`` (the turn detector's decision; a turn it
  judged unfinished waits here for its silence fallback);
- ``llm_first_token``: the transcript the LLM answers -> its first text token (a speculative reply's
  first token is held until the turn ends, so this includes the turn detector's wait; with
  ``llm.speculate_tts`` its whole reply, TTS audio included, counts from its release at the earliest:
  ``agent.held_reply_filter``, and a withdrawn one is not seen);
- ``first_clause``: the LLM's first token -> first clause handed to TTS (``TTSStartedFrame``);
- ``tts_first_audio``: first clause handed to TTS -> first TTS audio;
- ``audio_out``: first TTS audio -> ``BotStartedSpeakingFrame`` (the output transport starting it);
- ``first_audio``: end of speech -> ``BotStartedSpeakingFrame``.

Besides, ``turn_model``: each smart-turn inference's own time (its ``TurnMetricsData``), which sits
inside ``turn_end`` and grows when the session process's cores are busy.

Per chunk, two streams of ``TTSAudioRawFrame`` are followed: pieces as the TTS service
produces them (inter-arrival, and the reply's delivery ratio) and transport-sized chunks
after the output transport wrote them (lateness against a real-time player). The output
transport re-pushes what it wrote, so the two are told apart by the frame's source. A reply
is everything the bot says between one user turn start and the next.
"""

from __future__ import annotations

from pipecat.frames.frames import (
    BotStartedSpeakingFrame,
    InterruptionFrame,
    LLMTextFrame,
    MetricsFrame,
    TranscriptionFrame,
    TTSAudioRawFrame,
    TTSStartedFrame,
    UserStartedSpeakingFrame,
    UserStoppedSpeakingFrame,
    VADUserStoppedSpeakingFrame,
)
from pipecat.metrics.metrics import TurnMetricsData
from pipecat.observers.base_observer import BaseObserver, FramePushed
from pipecat.transports.base_output import BaseOutputTransport

from agent.held_reply_filter import HeldReplyFilter
from agent.metrics.delivery import PlayoutTracker
from agent.metrics.stages import StageMetrics, llm_asked


def _seconds(frame: TTSAudioRawFrame) -> float:
    return len(frame.audio) / (2.0 * frame.sample_rate * max(frame.num_channels, 1))


class MetricsObserver(BaseObserver):
    """Times every stage of one session into ``StageMetrics`` (shared by all sessions)."""

    def __init__(self, metrics: StageMetrics, session_id: str = ""):
        super().__init__(observe_every_push=False)
        self.session_id = session_id
        self._m = metrics
        self._offset_ns: int | None = None
        self._produced = PlayoutTracker()  # TTS pieces of the current reply
        self._delivered = PlayoutTracker()  # chunks the output transport wrote
        self._last_piece: float | None = None
        self._held_reply = HeldReplyFilter()
        self._new_turn()

    def _new_turn(self) -> None:
        self._eos: float | None = None
        self._transcript: float | None = None
        self._turn_end: float | None = None
        self._llm_token: float | None = None
        self._tts_start: float | None = None
        self._tts_audio: float | None = None
        self._audio_out: float | None = None

    def _abs(self, data: FramePushed) -> float:
        """The push time in ``time.monotonic()`` seconds."""
        if self._offset_ns is None:
            self._offset_ns = int(getattr(data.source.get_clock(), "_time", 0))
        return (data.timestamp + self._offset_ns) / 1e9

    def _close_reply(self) -> None:
        reply = self._produced.finish()
        self._delivered.finish()
        self._last_piece = None
        if reply is not None:
            self._m.replies_total += 1
            if reply.ratio is not None:
                self._m.record("output_rt_ratio", reply.ratio)

    def _stage(self, name: str, start: float | None, end: float) -> None:
        if start is not None:
            self._m.record(name, (end - start) * 1000.0)

    async def on_push_frame(self, data: FramePushed):
        for push in self._held_reply.feed(data):
            self._observe(push)

    def _observe(self, data: FramePushed) -> None:
        frame = data.frame
        if isinstance(frame, TTSAudioRawFrame):
            at = self._abs(data)
            if isinstance(data.source, BaseOutputTransport):
                first = not self._delivered.active
                late = self._delivered.chunk(at, _seconds(frame))
                if not first:
                    self._m.record("output_chunk_lateness", late * 1000.0)
                return
            if self._last_piece is not None:
                self._m.record("tts_chunk_interarrival", (at - self._last_piece) * 1000.0)
            self._last_piece = at
            self._produced.chunk(at, _seconds(frame))
            if self._tts_start is not None and self._tts_audio is None:
                self._tts_audio = at
                self._stage("tts_first_audio", self._tts_start, at)
        elif isinstance(frame, UserStartedSpeakingFrame):
            self._close_reply()
            if self._llm_token is not None:
                self._m.turns_total += 1
            self._new_turn()
        elif isinstance(frame, VADUserStoppedSpeakingFrame):
            self._eos = self._abs(data) - float(getattr(frame, "stop_secs", 0.0) or 0.0)
            self._transcript = None
            self._turn_end = None
        elif isinstance(frame, TranscriptionFrame):
            if self._eos is not None and self._transcript is None and self._llm_token is None:
                self._transcript = self._abs(data)
                self._stage("asr_final", self._eos, self._transcript)
        elif isinstance(frame, UserStoppedSpeakingFrame):
            if self._eos is not None and self._turn_end is None and self._llm_token is None:
                self._turn_end = self._abs(data)
                self._stage("turn_end", self._eos, self._turn_end)
        elif isinstance(frame, LLMTextFrame):
            if self._llm_token is None and self._transcript is not None:
                self._llm_token = self._abs(data)
                self._stage("llm_first_token", llm_asked(self._transcript, self._turn_end), self._llm_token)
        elif isinstance(frame, TTSStartedFrame):
            if self._llm_token is not None and self._tts_start is None:
                self._tts_start = self._abs(data)
                self._stage("first_clause", self._llm_token, self._tts_start)
        elif isinstance(frame, BotStartedSpeakingFrame):
            if self._llm_token is not None and self._audio_out is None:
                self._audio_out = self._abs(data)
                self._stage("first_audio", self._eos, self._audio_out)
                self._stage("audio_out", self._tts_audio, self._audio_out)
        elif isinstance(frame, InterruptionFrame):
            self._close_reply()
        elif isinstance(frame, MetricsFrame):
            for data in frame.data:
                if isinstance(data, TurnMetricsData):
                    self._m.record("turn_model", float(data.e2e_processing_time_ms))

    async def cleanup(self):
        self._close_reply()
        await super().cleanup()
