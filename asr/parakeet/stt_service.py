"""``ParakeetSTTService``: a pipecat streaming STT on the shared Parakeet stream batcher.

Per utterance (VAD start to VAD stop) the service opens a stream session, feeds it the audio
(plus a short pre-roll from before the VAD fired), pushes ``InterimTranscriptionFrame``s as
partials decode (every ``asr.partial_interval_ms`` of audio), and at VAD stop pushes one finalized
``TranscriptionFrame`` (empty when it heard no words); pipecat measures TTFB from the end of speech to it. Audio keeps
flowing while a final is computed: finals and interims go out from one ordered background task.

Every interim frame's ``result`` is a :class:`ParakeetPartial`: the batcher's result plus how many
partials in a row had this text. Once that reaches ``stable_partials`` the partial is *stable* and
the frame is pushed even when its text repeats the previous interim (once per text): the hook for an
eager end of turn or a speculative LLM request (start the reply on the stable text, cancel it if
the final differs or the caller goes on). ``request_partial()`` asks the batcher for a partial in
its next tick whatever the cadence; a ``CallerPauseFrame`` (the VAD began its stop window) does so, and the
first fresh partial (a whole-utterance decode, as the final pass makes; none comes for an utterance past the
left context) that holds the audio up to that pause is pushed even when its text repeats, marked ``at_pause``:
the text a speculative reply can start on ~0.1 s before the VAD's stop (``llm.speculate = "quiet"``). With
``final_from_pause``, if nothing audible came after that pause (``asr.eager_segment``'s level rule: under -40 dBFS
and 30 dB under the utterance's peak), that partial is the utterance's final too: what a decode of the quiet after
it would add is only what the model makes of silence.

``create_parakeet_stt(asr_config)`` builds it on the process-wide engine and batcher of
``asr.parakeet.shared_engine`` (no pipecat there), so every caller shares one batched model.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncGenerator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from loguru import logger
from pipecat.audio.utils import create_stream_resampler
from pipecat.frames.frames import (
    CancelFrame,
    EndFrame,
    Frame,
    InterimTranscriptionFrame,
    StartFrame,
    TranscriptionFrame,
    UserStartedSpeakingFrame,
    UserStoppedSpeakingFrame,
    VADUserStartedSpeakingFrame,
    VADUserStoppedSpeakingFrame,
)
from pipecat.processors.frame_processor import FrameDirection
from pipecat.services.settings import STTSettings
from pipecat.services.stt_service import STTService
from pipecat.transcriptions.language import Language
from pipecat.utils.time import time_now_iso8601
from pipecat.utils.tracing.service_decorators import traced_stt

from asr.parakeet.streaming import StreamResult, StreamSession
from asr.pause import CallerPauseFrame
from transports.audio_level import level_dbfs

if TYPE_CHECKING:  # the in-process batcher imports torch; a session process streaming through the engine does not
    from asr.parakeet.batcher import StreamBatcher

AUDIBLE_DBFS = -40.0  # asr.eager_segment's rule: audible = at least this loud ...
BELOW_PEAK_DB = 30.0  # ... or within this much of the utterance's peak


@dataclass
class ParakeetPartial:
    """What an ``InterimTranscriptionFrame`` from this service carries as ``result``."""

    result: StreamResult
    repeats: int  # partials in a row (this one included) with this text
    stable: bool  # repeats >= the service's stable_partials
    at_pause: bool = False  # the first partial holding the audio up to the caller's pause (CallerPauseFrame)


@dataclass
class _Interim:
    utterance: int
    result: StreamResult


@dataclass
class _Final:
    utterance: int
    session: StreamSession
    quiet_since_pause: bool = False  # a pause began and nothing audible followed it up to the VAD's stop
    audio_s: float = 0.0  # the utterance's audio fed


class ParakeetSTTService(STTService):
    """Streaming Parakeet-TDT transcription: interim results while the user speaks, a final at VAD stop."""

    def __init__(self, batcher: StreamBatcher, *, preroll_s: float = 0.4, language: str = "en",
                 ttfs_p99_latency: float | None = 1.0, model_name: str = "parakeet-tdt", stable_partials: int = 2,
                 final_from_pause: bool = True,  # only useful where CallerPauseFrames come: it reads every chunk's level
                 **kwargs: Any) -> None:
        kwargs.setdefault("settings", STTSettings(model=model_name, language=language))
        super().__init__(ttfs_p99_latency=ttfs_p99_latency, **kwargs)
        self._batcher = batcher
        self._engine_rate = batcher.config.sample_rate
        self._preroll_samples = int(preroll_s * self._engine_rate)
        self._preroll = np.zeros(0, dtype=np.float32)
        self._language = language
        self._session: StreamSession | None = None
        self._utterance = 0
        self._finalized = 0  # utterances up to this one are final: later interims for them are dropped
        self._events: asyncio.Queue[_Interim | _Final | None] = asyncio.Queue()
        self._events_task: asyncio.Task | None = None
        self._resampler = create_stream_resampler()
        self._last_interim = ""
        self._repeats = 0  # partials in a row with the text of _last_interim
        self._stable_sent = False  # a stable interim went out for _last_interim
        self._fed = 0  # samples fed to the open utterance (its pre-roll included)
        self._pause_at_s: float | None = None  # utterance seconds fed when the caller paused: the partial owed covers them
        self.final_from_pause = final_from_pause
        self._pause_result: tuple[int, StreamResult] | None = None  # (utterance, its partial at the pause)
        self._peak_dbfs = -120.0  # the utterance's loudest chunk so far
        self._paused = False  # a pause began and the caller has not gone on
        self._audible_since_pause = False
        self.stable_partials = max(1, int(stable_partials))

    def can_generate_metrics(self) -> bool:
        return True

    # ------------------------------------------------------------------ lifecycle
    async def start(self, frame: StartFrame) -> None:
        await super().start(frame)
        if self._events_task is None:
            self._events_task = self.create_task(self._event_loop(), name="parakeet_stt_events")

    async def stop(self, frame: EndFrame) -> None:
        await self._end_utterance()
        if self._events_task is not None:
            await self._events.put(None)
            await self._events_task
            self._events_task = None
        await super().stop(frame)

    async def cancel(self, frame: CancelFrame) -> None:
        if self._session is not None:
            self._batcher.close(self._session)
            self._session = None
        if self._events_task is not None:
            await self.cancel_task(self._events_task)
            self._events_task = None
        await super().cancel(frame)

    # ------------------------------------------------------------------ audio in
    async def run_stt(self, audio: bytes) -> AsyncGenerator[Frame | None, None]:
        if self.final_from_pause and self._session is not None:
            self._follow_level(level_dbfs(audio))
        if self.sample_rate != self._engine_rate:
            audio = await self._resampler.resample(audio, self.sample_rate, self._engine_rate)
        samples = np.frombuffer(audio, dtype=np.int16).astype(np.float32) / 32768.0
        if self._session is not None:
            self._batcher.feed(self._session, samples)
            self._fed += len(samples)
        else:
            self._preroll = np.concatenate([self._preroll, samples])[-self._preroll_samples :]
        yield None

    # ------------------------------------------------------------------ utterance boundaries
    async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
        if isinstance(frame, UserStartedSpeakingFrame) and self._session is None:
            self._begin_utterance()  # a turn start without a VAD start (no VAD in front of us)
        await super().process_frame(frame, direction)
        if isinstance(frame, UserStoppedSpeakingFrame):
            await self._end_utterance()
        elif isinstance(frame, CallerPauseFrame):
            self._on_pause(frame.quiet)

    def _follow_level(self, level: float) -> None:
        """One chunk's level: the utterance's peak, and whether the caller was audible again after a pause."""
        if self._paused and level >= min(AUDIBLE_DBFS, self._peak_dbfs - BELOW_PEAK_DB):
            self._audible_since_pause = True
        self._peak_dbfs = max(self._peak_dbfs, level)

    def _on_pause(self, quiet: bool) -> None:
        """The caller paused (ask for a partial of everything heard so far) or went on (never mind)."""
        self._pause_at_s, self._pause_result = None, None
        self._paused, self._audible_since_pause = quiet, False
        if quiet and self._session is not None:
            self._pause_at_s = self._fed / self._engine_rate
            self.request_partial(fresh=True)  # the final pass's text, not the chunk-by-chunk one

    async def _handle_vad_user_started_speaking(self, frame: VADUserStartedSpeakingFrame) -> None:
        await super()._handle_vad_user_started_speaking(frame)
        if self._session is None:
            self._begin_utterance()

    async def _handle_vad_user_stopped_speaking(self, frame: VADUserStoppedSpeakingFrame) -> None:
        await super()._handle_vad_user_stopped_speaking(frame)  # starts the TTFB clock
        await self._end_utterance()

    def _begin_utterance(self) -> None:
        self._utterance += 1
        utterance = self._utterance
        self._last_interim, self._repeats, self._stable_sent = "", 0, False
        self._pause_at_s = None
        self._peak_dbfs, self._paused, self._audible_since_pause = -120.0, False, False

        def on_partial(result: StreamResult) -> None:
            self._events.put_nowait(_Interim(utterance, result))

        self._session = self._batcher.open(on_partial=on_partial)
        self._fed = len(self._preroll)
        if len(self._preroll):
            self._batcher.feed(self._session, self._preroll)
        self._preroll = np.zeros(0, dtype=np.float32)

    def request_partial(self, fresh: bool = False) -> None:
        """Ask for a partial of the current utterance in the batcher's next tick (no-op between utterances); ``fresh``:
        a decode of the whole utterance so far, as the final pass makes."""
        if self._session is not None:
            self._batcher.request_partial(self._session, fresh=fresh)

    async def _end_utterance(self) -> None:
        if self._session is None:
            return
        session, self._session = self._session, None
        quiet = self._paused and not self._audible_since_pause
        await self._events.put(_Final(self._utterance, session, quiet, self._fed / self._engine_rate))

    # ------------------------------------------------------------------ results out, in order
    async def _event_loop(self) -> None:
        while (event := await self._events.get()) is not None:
            try:
                if isinstance(event, _Interim):
                    await self._push_interim(event)
                else:
                    await self._push_final(event)
            except Exception as exc:  # one bad utterance must not end the call
                logger.exception(f"{self}: parakeet transcription failed")
                await self.push_error(error_msg=f"Parakeet transcription failed: {exc}", exception=exc)

    async def _push_interim(self, event: _Interim) -> None:
        text = event.result.text
        if event.utterance <= self._finalized or not text:
            return
        at_pause = (self._pause_at_s is not None and event.utterance == self._utterance and event.result.fresh
                    and event.result.audio_s >= self._pause_at_s)
        if at_pause:
            self._pause_at_s = None
            self._pause_result = (event.utterance, event.result)
        if text == self._last_interim:
            self._repeats += 1
            if not at_pause and (self._stable_sent or self._repeats < self.stable_partials):
                return  # nothing new for a consumer
        else:
            self._last_interim, self._repeats, self._stable_sent = text, 1, False
        stable = self._repeats >= self.stable_partials
        self._stable_sent = stable
        partial = ParakeetPartial(event.result, self._repeats, stable, at_pause)
        await self.push_frame(InterimTranscriptionFrame(text, self._user_id, time_now_iso8601(), self._lang(),
                                                        result=partial))

    def _final_at_pause(self, event: _Final) -> StreamResult | None:
        """The partial at the pause as ``event``'s final, if nothing audible followed the pause (``final_from_pause``)."""
        pause = self._pause_result
        if not (self.final_from_pause and event.quiet_since_pause and pause and pause[0] == event.utterance):
            return None
        return dataclasses.replace(pause[1], final=True, audio_s=event.audio_s)

    async def _push_final(self, event: _Final) -> None:
        try:
            result = self._final_at_pause(event)
            if result is None:
                result = await self._batcher.finalize(event.session)
            else:
                logger.debug(f"{self}: final from the partial at the pause (quiet since)")
        finally:
            self._batcher.close(event.session)
            self._finalized = event.utterance
        await self.emit_stt_usage_metrics()
        if not result.text:
            logger.info(f"{self}: empty final transcript ({result.audio_s:.2f} s of audio)")
            await self.cancel_ttfb_metrics()
            # one final per utterance, an empty one too: the stop strategy ends a turn that heard no words on it
            # instead of leaving it open for pipecat's 5 s user_turn_stop_timeout (agent.finished_text_stop)
            empty = TranscriptionFrame("", self._user_id, time_now_iso8601(), self._lang(), result=result)
            empty.finalized = True
            await self.push_frame(empty)
            return
        await self._handle_transcription(result.text, True, self._lang())
        logger.debug(f"{self}: final [{result.text}]")
        frame = TranscriptionFrame(result.text, self._user_id, time_now_iso8601(), self._lang(), result=result)
        frame.finalized = True  # reports TTFB now: end of speech -> this frame
        await self.push_frame(frame)

    @traced_stt
    async def _handle_transcription(self, transcript: str, is_final: bool, language: Language | None = None):
        """Tracing hook (pipecat's span per final transcript)."""

    def _lang(self) -> Language | None:
        try:
            return Language(self._language)
        except ValueError:
            return None


def create_parakeet_stt(asr_config: Any, **kwargs: Any) -> ParakeetSTTService:
    """The factory ``asr.engine = "parakeet"`` selects: a service on the shared batcher."""
    from asr.parakeet.shared_engine import shared_parakeet_batcher

    batcher = shared_parakeet_batcher(asr_config)
    return ParakeetSTTService(
        batcher,
        model_name=Path(str(batcher.engine.checkpoint.source)).name or "parakeet-tdt",
        language=getattr(asr_config, "language", "en"),
        ttfs_p99_latency=getattr(asr_config, "ttfs_p99_s", 1.0),
        **{"final_from_pause": getattr(asr_config, "final_from_pause", True), **kwargs},
    )
