"""Serve many stream sessions with one encoder call and one decoder call per tick.

    batcher = StreamBatcher(engine, StreamConfig(chunk_ms=160))
    session = batcher.open(on_partial=callback)   # callback(StreamResult) in the event loop
    batcher.feed(session, samples)                # non-blocking; a tick runs once a chunk is ready
    final = await batcher.finalize(session)       # end of speech: the final result; the session resets
    batcher.close(session)

A single asyncio task gathers every session that owes a result (a partial due at its cadence,
``StreamConfig.partial_interval_ms``, one a consumer asked for with :meth:`StreamBatcher.request_partial`,
or a final), builds their windows, and runs features + encoder + decoder for all of them in a
worker thread. A session whose next partial is not due yet is not encoded at all: its audio waits
and the next window decodes every frame since the last one. Finals go first (the priority lane):
each tick takes every pending final before any partial, up to ``max_batch`` windows. Sessions
are only touched on the event loop thread; the worker sees copies of their audio and carries.

The encoder call groups a tick's windows by length (``ParakeetEngine.encode(..., by_length=True)``):
with the profiles :func:`stream_encoder_profiles` derives, windows up to half the longest run in a
half-length replay instead of being padded to ten seconds.

On CUDA the decoder carries stay on the device in one ``asr.parakeet.decoding.carry_bank.CarryBank``
(a row per open session, gathered and scattered with a few index ops per tick); a session's
``carry`` is then a :class:`BankedCarry` marker for its row. On the CPU each session holds its own
``DecoderCarry`` as before. ``carry_bank=True/False`` forces either path.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch

from asr.parakeet.decoding.label_looping import DecodedSeq, DecoderCarry
from asr.parakeet.engine import ParakeetEngine
from asr.parakeet.staging import AudioStaging
from asr.parakeet.streaming import StreamConfig, StreamResult, StreamSession, WindowRequest

if TYPE_CHECKING:
    from asr.parakeet.decoding.carry_bank import CarryBank

log = logging.getLogger(__name__)

PartialCallback = Callable[[StreamResult], None]

# Half-window profiles stop at this batch: a tick with more short windows than this is an overload,
# and it runs in the full-window profiles (each profile is one more compile + capture at start-up).
HALF_WINDOW_MAX_BATCH = 128


def stream_window_frames(config: StreamConfig) -> tuple[int, int]:
    """Feature frames of the longest window at the partial cadence, and of half of it (both aligned)."""
    from asr.parakeet.encoders.shape_profiles import aligned_frames

    full = aligned_frames(config.max_window_samples // 160 + 1)
    return full, aligned_frames(full // 2)


def stream_encoder_profiles(config: StreamConfig, max_batch: int) -> str:
    """Encoder shape profiles for a stream batcher: ``name=BATCHxFRAMES`` (``cuda_graphs``' format).

    ``s<B>``: the longest window at the partial cadence (``config.max_window_samples``) at every batch
    step of ``asr.parakeet.encoders.shape_profiles.streaming_profiles`` up to ``max_batch``, plus its ``lag``
    profile (twice the frames) for sessions that fell behind; ``h<B>``: half that window, batch steps up
    to ``min(max_batch, HALF_WINDOW_MAX_BATCH)``, for utterances shorter than half the left context
    (most turns of a conversation), which the engine groups by length (``encode(..., by_length=True)``).
    """
    from asr.parakeet.encoders.shape_profiles import STREAM_BATCH_STEPS, streaming_profiles

    full = streaming_profiles(config.max_window_samples, max_batch)
    frames, half = stream_window_frames(config)
    if half >= frames:
        return full
    cap = min(max_batch, HALF_WINDOW_MAX_BATCH)
    batches = [b for b in STREAM_BATCH_STEPS if b < cap] + [cap]
    return full + "," + ",".join(f"h{b}={b}x{half}" for b in batches)


@dataclass
class _Job:
    session: StreamSession
    final: bool = False
    futures: list[asyncio.Future[StreamResult]] = field(default_factory=list)


@dataclass(frozen=True)
class BankedCarry:
    """A session's carry when it lives in the batcher's device carry bank (row ``slot``)."""

    slot: int


@dataclass
class TickStats:
    """Counters a benchmark or the metrics layer can read."""

    ticks: int = 0
    windows: int = 0
    finals: int = 0  # windows that were finals
    max_windows: int = 0  # the most windows one tick held
    partials: int = 0  # partial results delivered
    audio_s: float = 0.0  # window audio encoded
    busy_s: float = 0.0  # time in the worker
    device_s: float = 0.0  # of that, from the encoder's launch to the tokens on the host (the rest is host work)


class StreamBatcher:
    def __init__(self, engine: ParakeetEngine, config: StreamConfig | None = None, max_batch: int = 32,
                 carry_bank: bool | None = None) -> None:
        self.engine = engine
        base = config or StreamConfig()
        self.config = dataclasses.replace(base, sample_rate=engine.sample_rate,
                                          samples_per_frame=engine.samples_per_frame)
        self.max_batch = max_batch
        # a tick's windows reach the device in a constant number of operations (see staging.py)
        self._staging = AudioStaging(engine.device)
        # Ticks run on their own high-priority CUDA stream: on the legacy default stream they would queue
        # behind whatever else the process runs there (the engine process's Kokoro batches: run 27 measured
        # end of speech -> final p99 348 ms at 64 callers beside Kokoro, ~30 ms alone).
        self._cuda_stream = torch.cuda.Stream(engine.device, priority=-1) if engine.device.type == "cuda" else None
        # Device-resident carries: on by default on CUDA (None), forced on/off by True/False.
        self.use_carry_bank = engine.device.type == "cuda" if carry_bank is None else bool(carry_bank)
        self._bank: CarryBank | None = None
        self._slots: dict[int, int] = {}  # session id -> bank row (event loop thread, or process() callers)
        self._free_slots: list[int] = []
        self.stats = TickStats()
        self._jobs: dict[int, _Job] = {}
        self._listeners: dict[int, PartialCallback | None] = {}
        self._wake: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._task: asyncio.Task[None] | None = None
        self._tick_started = 0.0  # monotonic seconds when the unfinished tick began (0: none running)

    def stalled_s(self) -> float:
        """How long the unfinished tick has run, in seconds (0: none): the engine's watchdog reads it."""
        started = self._tick_started
        return time.monotonic() - started if started else 0.0

    # ------------------------------------------------------------------ sessions
    def open(self, on_partial: PartialCallback | None = None) -> StreamSession:
        session = StreamSession(self.config)
        self._listeners[session.id] = on_partial
        return session

    def close(self, session: StreamSession) -> None:
        self._listeners.pop(session.id, None)
        slot = self._slots.pop(session.id, None)
        if slot is not None:  # an in-flight tick may still store into it; the next owner starts with a reset
            self._free_slots.append(slot)
        job = self._jobs.pop(session.id, None)
        for fut in job.futures if job else ():
            if not fut.done():
                fut.cancel()

    def feed(self, session: StreamSession, samples) -> None:
        """Append audio; schedule a tick for this session once a whole chunk is ready."""
        session.push(samples)
        self._schedule(session)

    def request_partial(self, session: StreamSession, fresh: bool = False) -> None:
        """Ask for a partial of ``session`` in the next tick, whatever the cadence (once it has a new chunk); ``fresh``:
        a decode of the whole utterance so far, as the final pass makes (at once, chunk or not)."""
        session.partial_requested = True
        session.fresh_requested = session.fresh_requested or fresh
        self._schedule(session)

    def pending(self, session: StreamSession) -> bool:
        """Whether a tick for ``session`` is queued or running."""
        return session.in_flight or session.id in self._jobs

    async def finalize(self, session: StreamSession) -> StreamResult:
        """Decode everything left, return the final result, and reset the session for the next utterance."""
        return await self.request_final(session)

    def request_final(self, session: StreamSession) -> asyncio.Future[StreamResult]:
        """:meth:`finalize` without waiting: the final is queued (ahead of every partial) before this returns."""
        fut: asyncio.Future[StreamResult] = asyncio.get_running_loop().create_future()
        job = self._jobs.setdefault(session.id, _Job(session))
        job.final = True
        job.futures.append(fut)
        self._kick()
        return fut

    async def aclose(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    # ------------------------------------------------------------------ the tick loop
    def _schedule(self, session: StreamSession) -> None:
        if session.id in self._jobs or session.in_flight or not session.partial_due():
            return
        self._jobs[session.id] = _Job(session)
        self._kick()

    def _kick(self) -> None:
        loop = asyncio.get_running_loop()
        if self._loop is not loop:  # first use, or a new event loop (tests): start over on this one
            self._loop, self._wake, self._task = loop, asyncio.Event(), None
        if self._task is None or self._task.done():
            self._task = loop.create_task(self._run(), name="parakeet-batcher")
        assert self._wake is not None
        self._wake.set()

    async def _run(self) -> None:
        assert self._wake is not None
        while True:
            await self._wake.wait()
            self._wake.clear()
            while True:
                ready = self._take()
                if not ready:
                    break
                for job in ready:
                    del self._jobs[job.session.id]
                    job.session.in_flight = True
                try:
                    await self._tick(ready)
                finally:
                    for job in ready:
                        job.session.in_flight = False
                        if not job.final:
                            self._schedule(job.session)  # audio that arrived during the tick

    def _take(self) -> list[_Job]:
        """The next tick's jobs: every pending final first (the priority lane), then partials in the
        order they came due, at most ``max_batch``."""
        waiting = [j for j in self._jobs.values() if not j.session.in_flight]
        finals = [j for j in waiting if j.final]
        if finals and len(finals) < len(waiting):
            waiting = finals + [j for j in waiting if not j.final]
        return waiting[: self.max_batch]

    async def _tick(self, jobs: list[_Job]) -> None:
        requests = [job.session.next_request(final=job.final) for job in jobs]
        work = [(job, req) for job, req in zip(jobs, requests, strict=True) if req is not None]
        loop = asyncio.get_running_loop()
        start = loop.time()
        slots = [self._slot(req.session) for _, req in work] if self.use_carry_bank else None
        self._tick_started = time.monotonic()
        try:
            decoded = await asyncio.to_thread(self._process_on_stream, [req for _, req in work], slots) if work else []
        except Exception as exc:  # fail this tick's waiters, keep serving others
            log.exception("parakeet tick failed")
            for job in jobs:
                for fut in job.futures:
                    if not fut.done():
                        fut.set_exception(exc)
            return
        finally:
            self._tick_started = 0.0
            for _, req in work:  # sessions closed during the tick give their bank row back
                if req.session.id not in self._listeners and req.session.id in self._slots:
                    self._free_slots.append(self._slots.pop(req.session.id))
        self.stats.ticks += 1
        self.stats.windows += len(work)
        self.stats.finals += sum(req.final for _, req in work)
        self.stats.max_windows = max(self.stats.max_windows, len(work))
        self.stats.busy_s += loop.time() - start
        results: dict[int, StreamResult] = {}
        for (job, req), (seq, carry, end_frame) in zip(work, decoded, strict=True):
            result = job.session.apply(req, seq, carry, end_frame)
            result.text = self.engine.tokenizer.decode(result.tokens).strip()
            results[job.session.id] = result
        for job in jobs:
            session = job.session
            result = results.get(session.id) or self._snapshot(session, job.final)
            if job.final:
                session.reset()
                for fut in job.futures:
                    if not fut.done():
                        fut.set_result(result)
            else:
                listener = self._listeners.get(session.id)
                if listener is not None:
                    self.stats.partials += 1
                    listener(result)

    def _snapshot(self, session: StreamSession, final: bool) -> StreamResult:
        return StreamResult(session.id, final, self.engine.tokenizer.decode(session.tokens).strip(),
                            list(session.tokens), list(session.frames), list(session.durations),
                            session.total_samples / self.config.sample_rate)

    # ------------------------------------------------------------------ device carry bank
    def _slot(self, session: StreamSession) -> int:
        """The bank row of ``session`` (allocated on first use, freed by :meth:`close`)."""
        slot = self._slots.get(session.id)
        if slot is None:
            slot = self._free_slots.pop() if self._free_slots else len(self._slots)
            self._slots[session.id] = slot
        return slot

    def _bank_for(self, slots: list[int]) -> CarryBank:
        """The carry bank, created or grown (doubling) to hold every row in ``slots``."""
        need = max(slots, default=-1) + 1
        if self._bank is None:
            from asr.parakeet.decoding.carry_bank import CarryBank

            self._bank = CarryBank(self.engine.decoder, max(need, self.max_batch))
        elif need > self._bank.streams:
            self._bank.grow(max(need, 2 * self._bank.streams))
        return self._bank

    # ------------------------------------------------------------------ the heavy part (worker thread)
    def _process_on_stream(self, requests: list[WindowRequest], slots: list[int] | None
                           ) -> list[tuple[DecodedSeq, DecoderCarry | BankedCarry, int]]:
        with torch.cuda.stream(self._cuda_stream):  # None (CPU): no-op
            return self.process(requests, slots)

    def process(self, requests: list[WindowRequest], slots: list[int] | None = None
                ) -> list[tuple[DecodedSeq, DecoderCarry | BankedCarry, int]]:
        """One encoder call and one decoder call for all windows; returns (tokens, carry, end frame).

        With the carry bank, ``slots`` are the sessions' bank rows (allocated here when not given) and
        the returned carries are :class:`BankedCarry` markers.
        """
        audio, lengths = self._staging.stage([r.audio for r in requests])
        if audio.shape[1] == 0:
            audio = torch.zeros(len(requests), 1)
        self.stats.audio_s += float(lengths.sum()) / self.config.sample_rate
        # Everything the decode needs from the host is planned before the encoder is launched: frame
        # counts come from the sample counts, and the bank's row indices are copied while the stream
        # holds only the audio copy. The decoder's launches then overlap the encoder on the GPU; the
        # one host sync of the tick is collecting the tokens.
        enc_lengths = self.engine.encoded_lengths(lengths.tolist())
        starts, ends = [], []
        for r, n in zip(requests, enc_lengths, strict=True):
            end = n if r.end_frame is None else min(n, r.end_frame - r.window_start_frame)
            starts.append(min(r.start_frame - r.window_start_frame, end))
            ends.append(end)
        if self.use_carry_bank:
            if slots is None:
                slots = [self._slot(r.session) for r in requests]
            bank = self._bank_for(slots)
            device = bank.last_label.device
            # New utterances and fresh final passes (carry None) start from the decoder's start state;
            # so does a carry that is not this row's marker (a session closed mid-tick and re-queued).
            fresh = [slot for r, slot in zip(requests, slots, strict=True) if r.carry != BankedCarry(slot)]
            if fresh:
                bank.reset(torch.tensor(fresh, dtype=torch.long).to(device))
            rows = torch.tensor(slots, dtype=torch.long).to(device)
            launched = time.perf_counter()
            encoded = self.engine.encode(audio, lengths, by_length=True)
            seqs = self.engine.decode_banked(encoded, bank, rows, start_frames=starts, end_frames=ends)
            carries: list[DecoderCarry | BankedCarry] = [BankedCarry(slot) for slot in slots]
        else:
            launched = time.perf_counter()
            encoded = self.engine.encode(audio, lengths, by_length=True)
            seqs, plain = self.engine.decode(encoded, carry=[r.carry for r in requests], start_frames=starts,
                                             end_frames=ends)
            carries = list(plain)
        self.stats.device_s += time.perf_counter() - launched
        return [(seq, carry, r.window_start_frame + end)
                for r, seq, carry, end in zip(requests, seqs, carries, ends, strict=True)]
