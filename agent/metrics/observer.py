"""The per-session pipecat observer that feeds the shared stage histograms.

Per turn it reuses ``TurnObserver`` (push-timestamped stage times). Per chunk it follows two
streams of ``TTSAudioRawFrame``: pieces as the TTS service produces them (inter-arrival, and
each reply's delivery ratio), and transport-sized chunks as the output transport has written
them (lateness against a real-time player). The output transport re-pushes the chunks it
wrote, so frames are told apart by their source.
"""

from __future__ import annotations

from pipecat.frames.frames import (
    BotStoppedSpeakingFrame,
    InterruptionFrame,
    TTSAudioRawFrame,
    TTSStartedFrame,
    TTSStoppedFrame,
)
from pipecat.observers.base_observer import FramePushed
from pipecat.transports.base_output import BaseOutputTransport

from agent.metrics.delivery import PlayoutTracker
from agent.metrics.stages import StageMetrics
from agent.turn_observer import TurnObserver, TurnTiming


def _seconds(frame: TTSAudioRawFrame) -> float:
    return len(frame.audio) / (2.0 * frame.sample_rate * max(frame.num_channels, 1))


class MetricsObserver(TurnObserver):
    """Times every stage of one session into ``StageMetrics`` (shared by all sessions)."""

    def __init__(self, metrics: StageMetrics, session_id: str = ""):
        super().__init__(on_turn=self._turn_done)
        self.session_id = session_id
        self._metrics = metrics
        self._produced = PlayoutTracker()  # TTS pieces of the current reply
        self._delivered = PlayoutTracker()  # chunks the output transport wrote
        self._last_piece: float | None = None

    def _turn_done(self, timing: TurnTiming) -> None:
        self._metrics.record_turn(timing)
        self.turns.clear()  # a long call must not grow this list

    def _close_production(self) -> None:
        reply = self._produced.finish()
        self._last_piece = None
        if reply is not None:
            self._metrics.replies_total += 1
            if reply.ratio is not None:
                self._metrics.record("output_rt_ratio", reply.ratio)

    async def on_push_frame(self, data: FramePushed):
        frame = data.frame
        if isinstance(frame, TTSAudioRawFrame):
            at = self._abs(data)
            if isinstance(data.source, BaseOutputTransport):
                first = not self._delivered.active
                late = self._delivered.chunk(at, _seconds(frame))
                if not first:
                    self._metrics.record("output_chunk_lateness", late * 1000.0)
                return  # written chunks are not TTS output: keep them out of the turn timing
            if self._last_piece is not None:
                self._metrics.record("tts_chunk_interarrival", (at - self._last_piece) * 1000.0)
            self._last_piece = at
            self._produced.chunk(at, _seconds(frame))
        elif isinstance(frame, TTSStartedFrame):
            if self._produced.active:
                self._close_production()
        elif isinstance(frame, TTSStoppedFrame):
            self._close_production()
        elif isinstance(frame, BotStoppedSpeakingFrame):
            self._delivered.finish()
        elif isinstance(frame, InterruptionFrame):
            self._close_production()
            self._delivered.finish()
        await super().on_push_frame(data)

    async def cleanup(self):
        self._close_production()
        await super().cleanup()
