"""``ParakeetSTTService``: a pipecat streaming STT on the shared Parakeet stream batcher.

Per utterance (VAD start to VAD stop) the service opens a stream session, feeds it the audio
(plus a short pre-roll from before the VAD fired), pushes ``InterimTranscriptionFrame``s as
partials decode (every ``asr.partial_interval_ms`` of audio), and at VAD stop pushes one finalized
``TranscriptionFrame``; pipecat measures TTFB from the end of speech to that frame. Audio keeps
flowing while a final is computed: finals and interims go out from one ordered background task.

Every interim frame's ``result`` is a :class:`ParakeetPartial`: the batcher's result plus how many
partials in a row had this text. Once that reaches ``stable_partials`` the partial is *stable* and
the frame is pushed even when its text repeats the previous interim (once per text): the hook for an
eager end of turn or a speculative LLM request (start the reply on the stable text, cancel it if
the final differs or the caller goes on). ``request_partial()`` asks the batcher for a partial in
its next tick whatever the cadence (e.g. when a consumer sees the caller go quiet).

``create_parakeet_stt(asr_config)`` builds it on a process-wide engine and batcher, so every
caller shares one batched model.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncGenerator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

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

from asr.parakeet.batcher import StreamBatcher, stream_encoder_profiles
from asr.parakeet.streaming import StreamConfig, StreamResult, StreamSession


@dataclass
class ParakeetPartial:
    """What an ``InterimTranscriptionFrame`` from this service carries as ``result``."""

    result: StreamResult
    repeats: int  # partials in a row (this one included) with this text
    stable: bool  # repeats >= the service's stable_partials


@dataclass
class _Interim:
    utterance: int
    result: StreamResult


@dataclass
class _Final:
    utterance: int
    session: StreamSession


class ParakeetSTTService(STTService):
    """Streaming Parakeet-TDT transcription: interim results while the user speaks, a final at VAD stop."""

    def __init__(self, batcher: StreamBatcher, *, preroll_s: float = 0.4, language: str = "en",
                 ttfs_p99_latency: float | None = 1.0, model_name: str = "parakeet-tdt", stable_partials: int = 2,
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
        if self.sample_rate != self._engine_rate:
            audio = await self._resampler.resample(audio, self.sample_rate, self._engine_rate)
        samples = np.frombuffer(audio, dtype=np.int16).astype(np.float32) / 32768.0
        if self._session is not None:
            self._batcher.feed(self._session, samples)
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

        def on_partial(result: StreamResult) -> None:
            self._events.put_nowait(_Interim(utterance, result))

        self._session = self._batcher.open(on_partial=on_partial)
        if len(self._preroll):
            self._batcher.feed(self._session, self._preroll)
        self._preroll = np.zeros(0, dtype=np.float32)

    def request_partial(self) -> None:
        """Ask for a partial of the current utterance in the batcher's next tick (no-op between utterances)."""
        if self._session is not None:
            self._batcher.request_partial(self._session)

    async def _end_utterance(self) -> None:
        if self._session is None:
            return
        session, self._session = self._session, None
        await self._events.put(_Final(self._utterance, session))

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
        if text == self._last_interim:
            self._repeats += 1
            if self._stable_sent or self._repeats < self.stable_partials:
                return  # nothing new for a consumer
        else:
            self._last_interim, self._repeats, self._stable_sent = text, 1, False
        stable = self._repeats >= self.stable_partials
        self._stable_sent = stable
        partial = ParakeetPartial(event.result, self._repeats, stable)
        await self.push_frame(InterimTranscriptionFrame(text, self._user_id, time_now_iso8601(), self._lang(),
                                                        result=partial))

    async def _push_final(self, event: _Final) -> None:
        try:
            result = await self._batcher.finalize(event.session)
        finally:
            self._batcher.close(event.session)
            self._finalized = event.utterance
        await self.emit_stt_usage_metrics()
        if not result.text:
            await self.cancel_ttfb_metrics()
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


# ---------------------------------------------------------------------------- process-wide sharing
_SHARED: dict[tuple, StreamBatcher] = {}
_SHARED_LOCK = threading.Lock()
TINY_DIR = Path.home() / ".cache" / "cadence" / "parakeet-tiny"


def resolve_parakeet_model(asr_config: Any) -> str:
    """The configured checkpoint, or (empty ``asr.model``) a tiny random one built offline on first use."""
    if asr_config.model:
        return str(asr_config.model)
    if not (TINY_DIR / "config.json").is_file():
        from asr.parakeet.tiny import make_tiny_checkpoint

        logger.warning(f"asr.model is empty: building a tiny RANDOM Parakeet checkpoint in {TINY_DIR} "
                       "(plumbing demo only: its words are nonsense)")
        make_tiny_checkpoint(TINY_DIR)
    return str(TINY_DIR)


def stream_max_batch(asr_config: Any) -> int:
    """``asr.stream_max_batch``, or (0) 256 windows per tick on CUDA and 32 elsewhere."""
    configured = int(getattr(asr_config, "stream_max_batch", 0) or 0)
    if configured < 0:
        raise ValueError(f"asr.stream_max_batch must be >= 0, got {configured}")
    return configured or (256 if str(asr_config.device).startswith("cuda") else 32)


def stream_config(asr_config: Any) -> StreamConfig:
    """The stream settings of ``asr_config`` (``partial_interval_ms`` absent: the StreamConfig default)."""
    interval = getattr(asr_config, "partial_interval_ms", None)
    if interval is None:
        interval = StreamConfig.partial_interval_ms
    if int(interval) < 0:
        raise ValueError(f"asr.partial_interval_ms must be >= 0, got {interval}")
    return StreamConfig(chunk_ms=int(asr_config.chunk_ms), left_context_s=float(asr_config.left_context_s),
                        right_context_ms=int(asr_config.right_context_ms), partial_interval_ms=int(interval))


def stream_profiles(asr_config: Any, stream: StreamConfig, max_batch: int) -> str:
    """The encoder profiles for streaming: the configured ones, or for ``cuda_graphs`` on CUDA a set
    fitted to the stream windows at the partial cadence and the batch (full and half windows, one graph
    per batch step: ``asr.parakeet.batcher.stream_encoder_profiles``), or "" (backend defaults)."""
    configured = str(getattr(asr_config, "profiles", "") or "")
    if configured or asr_config.encoder_backend != "cuda_graphs" or not str(asr_config.device).startswith("cuda"):
        return configured
    return stream_encoder_profiles(stream, max_batch)


def shared_parakeet_batcher(asr_config: Any, max_batch: int | None = None) -> StreamBatcher:
    """One engine and one batcher per (model, device, dtype, backend, streaming shape, batch, decoder
    graph mode, profiles) in the process."""
    from asr.parakeet.engine import ParakeetEngine, check_decoder_graph_mode

    model = resolve_parakeet_model(asr_config)
    stream = stream_config(asr_config)
    graph_mode = check_decoder_graph_mode(getattr(asr_config, "decoder_graph_mode", "auto") or "auto")
    max_batch = max_batch or stream_max_batch(asr_config)
    profiles = stream_profiles(asr_config, stream, max_batch)
    key = (model, asr_config.device, asr_config.dtype, asr_config.encoder_backend, stream, max_batch,
           profiles, graph_mode)
    with _SHARED_LOCK:
        if key not in _SHARED:
            options = {}
            if profiles:  # shape profiles for the compiled / cuda_graphs / tensorrt backends
                options["profiles"] = profiles
            engine = ParakeetEngine.from_pretrained(model, device=asr_config.device, dtype=asr_config.dtype,
                                                    encoder_backend=asr_config.encoder_backend,
                                                    decoder_graph_mode=graph_mode, **options)
            if getattr(engine, "graph_decoder", None) is not None:  # one capture at the largest tick (as the bench)
                engine.graph_decoder.ensure(max_batch, max(64, engine.encoded_lengths([stream.max_window_samples])[0]))
            engine.warmup()
            _SHARED[key] = StreamBatcher(engine, stream, max_batch=max_batch)
        return _SHARED[key]


def warm_parakeet(asr_config: Any) -> None:
    """Load (and warm) the shared engine before the first caller arrives."""
    shared_parakeet_batcher(asr_config)


def create_parakeet_stt(asr_config: Any, **kwargs: Any) -> ParakeetSTTService:
    """The factory ``asr.engine = "parakeet"`` selects: a service on the shared batcher."""
    batcher = shared_parakeet_batcher(asr_config)
    return ParakeetSTTService(
        batcher,
        model_name=Path(str(batcher.engine.checkpoint.source)).name or "parakeet-tdt",
        language=getattr(asr_config, "language", "en"),
        ttfs_p99_latency=getattr(asr_config, "ttfs_p99_s", 1.0),
        **kwargs,
    )
