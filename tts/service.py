"""``CadenceTTSService``: a pipecat TTS service over any ``TTSEngine``.

Text arrives clause-first (``ClauseTextAggregator``); each engine piece is pushed as soon as
it is synthesized, resampled once to the pipeline's output rate. The first piece of each reply (or
spoken prompt) loses the voice's leading near-silence (``tts.lead_trim``): it only delays the caller.

An engine with ``synthesize_stream(text) -> AsyncIterator[bytes]`` (the batched GPU engines) is
awaited on the event loop directly: no worker thread per caller, so hundreds of sessions do not
queue behind ``asyncio.to_thread``'s pool. The stream is closed when ``run_tts`` ends or is
cancelled (barge-in, a caller who hangs up), which withdraws its queued synthesis requests.
Other engines' blocking ``synthesize`` runs piece by piece in a worker thread.

With ``withdraw_on_cancel`` (a pipeline whose LLM stage sends speculative replies on unheld, for a gate after
this stage to hold) an ``EagerEndOfTurnCancelFrame`` is an interruption of this stage alone: the withdrawn
reply's synthesis is cancelled and its queued text and audio dropped, as on a barge-in, while the frame goes
on to the gate. A withdrawal comes only while the caller's turn is open, when nothing else interruptible is
being spoken (the turn's start interrupted it); uninterruptible speech is kept, as on a barge-in.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, AsyncIterator, Iterator

from loguru import logger
from pipecat.frames.frames import EagerEndOfTurnCancelFrame, ErrorFrame, Frame, InterruptionFrame
from pipecat.processors.frame_processor import FrameDirection
from pipecat.services.settings import TTSSettings
from pipecat.services.tts_service import TTSService

from tts.clause_aggregator import MAX_FIRST_WORDS, ClauseTextAggregator
from tts.engines import TTSEngine
from tts.lead_trim import trim_leading_silence
from tts.phrase_cache import PhraseCache

_DONE = object()
# pipecat ends a TTS audio context (TTSStoppedFrame: the bot stops speaking) after this long without audio, 3 s by
# default. A reply's later clause that an overloaded engine delivers later than that would then stop the bot
# mid-reply and go out as a second spurt (the CPU box at 16 callers: the turn counted as answered twice). A reply's
# context is closed when its text ends, so this only bounds a stall, not the end of a reply.
STALL_TOLERANCE_S = 15.0


class CadenceTTSService(TTSService):
    """Streams engine audio into the pipeline; the first clause is spoken early."""

    def __init__(self, engine: TTSEngine, *, clause_min_words: int = 2, first_clause_max_words: int = MAX_FIRST_WORDS,
                 withdraw_on_cancel: bool = False, phrase_cache: PhraseCache | None = None, **kwargs):
        """``phrase_cache``: the process's recorded fixed phrases (``tts.phrase_cache``); None: none.

        ``first_clause_max_words``: a reply's first clause with no clause mark is sent to synthesis after this many
        words (``tts.first_clause_max_words``).
        """
        kwargs.setdefault("stop_frame_timeout_s", STALL_TOLERANCE_S)
        super().__init__(
            push_start_frame=True,
            push_stop_frames=True,
            settings=TTSSettings(model=engine.name, voice=None, language=None),
            **kwargs,
        )
        self._engine = engine
        self._text_aggregator = ClauseTextAggregator(min_words=clause_min_words, max_first_words=first_clause_max_words)
        self._untrimmed_context: str | None = None  # a reply whose first audio is still to come
        self._withdraw_on_cancel = withdraw_on_cancel
        self._phrase_cache = phrase_cache
        self.withdrawals = 0  # speculative replies whose synthesis a withdrawal cancelled (tests, diagnosis)

    def can_generate_metrics(self) -> bool:
        return True

    async def process_frame(self, frame: Frame, direction: FrameDirection):
        if (self._withdraw_on_cancel and isinstance(frame, EagerEndOfTurnCancelFrame)
                and direction == FrameDirection.DOWNSTREAM):
            await self._drop_withdrawn_reply()
        await super().process_frame(frame, direction)

    async def _drop_withdrawn_reply(self) -> None:
        """What an ``InterruptionFrame`` does here, without sending one on (the bot is not speaking)."""
        self.withdrawals += 1
        await self._start_interruption()  # cancels the synthesis under way, drops the queued text
        await self.stop_all_metrics()
        await self._handle_interruption(InterruptionFrame(), FrameDirection.DOWNSTREAM)  # open audio contexts

    async def _pieces(self, iterator: Iterator[bytes]) -> AsyncIterator[bytes]:
        def step() -> object:
            return next(iterator, _DONE)

        while True:
            piece = await asyncio.to_thread(step)
            if piece is _DONE:
                return
            yield piece  # type: ignore[misc]

    async def on_turn_context_created(self, context_id: str):
        self._untrimmed_context = context_id
        await super().on_turn_context_created(context_id)

    async def _trim_first(self, pieces: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
        """The reply's first audible piece without its leading quiet (quiet pieces before it dropped);
        the rest unchanged."""
        trimming = True
        async with contextlib.aclosing(pieces):
            async for piece in pieces:
                if trimming:
                    piece = trim_leading_silence(piece, self._engine.sample_rate)
                    trimming = not piece
                if piece:
                    yield piece

    def _source(self, text: str) -> AsyncIterator[bytes]:
        """The engine's pieces for ``text``: a fixed phrase's recording when the process has one."""
        cache = self._phrase_cache
        if cache is not None and cache.wants(text):
            recorded = cache.get(text)
            if recorded is not None:
                return cache.replay(recorded)
        stream = getattr(self._engine, "synthesize_stream", None)
        source = stream(text) if stream is not None else self._pieces(iter(self._engine.synthesize(text)))
        if cache is not None and cache.wants(text):
            return cache.recording(text, source)
        return source

    async def run_tts(self, text: str, context_id: str) -> AsyncGenerator[Frame, None]:
        try:
            await self.start_tts_usage_metrics(text)
            source = self._source(text)
            if context_id == self._untrimmed_context:
                self._untrimmed_context = None
                source = self._trim_first(source)
            async with contextlib.aclosing(source) as pieces, contextlib.aclosing(
                self._stream_audio_frames_from_iterator(
                    pieces, in_sample_rate=self._engine.sample_rate, context_id=context_id
                )
            ) as frames:
                async for frame in frames:
                    await self.stop_ttfb_metrics()
                    yield frame
        except Exception as exc:  # the engine failed: report it, keep the session
            logger.error(f"{self}: {self._engine.name} failed on {text!r}: {exc}")
            yield ErrorFrame(error=f"TTS failed: {exc}")
        finally:
            await self.stop_ttfb_metrics()
