"""A file (or a corpus) to transcripts: decode -> plan -> engine -> stitch.

``OfflineTranscriber`` serves concurrent requests on one engine through the
``WindowBatcher``; ``transcribe_corpus`` is the synchronous form for batch jobs (Ray
workers, ``cadence transcribe``), batching the windows of several files by length itself.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import aclosing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from asr.offline.decode import DecodeStream, decode_file
from asr.offline.plan import PlanStream, Window, plan_windows
from asr.offline.results import Transcript, Word
from asr.offline.stitch import build_transcript, place_words
from asr.offline.window_batcher import WindowBatcher, length_batches
from asr.offline.window_engine import WindowEngine


@dataclass
class Timings:
    decode_s: float = 0.0
    plan_s: float = 0.0
    asr_s: float = 0.0
    windows: int = 0
    voiced_s: float = 0.0


def timings_header(t: Timings, audio_s: float) -> str:
    """The ``x-cadence-timings`` header: where a request's time went."""
    return json.dumps({"decode_s": round(t.decode_s, 4), "plan_s": round(t.plan_s, 4), "asr_s": round(t.asr_s, 4),
                       "windows": t.windows, "voiced_s": round(t.voiced_s, 2), "audio_s": round(audio_s, 3)})


def _prepare(engine: WindowEngine, audio: np.ndarray) -> tuple[list[Window], list[np.ndarray]]:
    windows = plan_windows(audio, engine.sample_rate, engine.plan)
    return windows, [w.audio(audio) for w in windows]


def _finish(engine: WindowEngine, windows: list[Window], words: list[list[Word]], n_samples: int,
            language: str | None) -> Transcript:
    placed = [w for win, ws in zip(windows, words, strict=True) for w in place_words(win, ws, engine.sample_rate)]
    return build_transcript(placed, n_samples / engine.sample_rate, language or "en")


class OfflineTranscriber:
    """Concurrent requests on one engine.

    ``batcher`` defaults to a ``WindowBatcher`` on ``engine`` in this process; a host worker
    passes a ``RemoteBatcher`` (the engine process's) and an ``EngineInfo`` for ``engine``.
    """

    def __init__(self, engine: WindowEngine | Any, max_batch: int | None = None, batcher: Any = None) -> None:
        self.engine = engine
        self.batcher = batcher if batcher is not None else WindowBatcher(engine, max_batch)

    async def transcribe_audio(self, audio: np.ndarray, language: str | None,
                               timings: Timings | None = None) -> Transcript:
        timings = timings or Timings()
        t0 = time.perf_counter()
        windows, clips = await asyncio.to_thread(_prepare, self.engine, audio)
        t1 = time.perf_counter()
        words = await self.batcher.transcribe(clips, language)
        timings.plan_s, timings.asr_s = t1 - t0, time.perf_counter() - t1
        timings.windows = len(windows)
        timings.voiced_s = sum(w.length for w in windows) / self.engine.sample_rate
        return _finish(self.engine, windows, words, len(audio), language)

    async def stream_audio(self, audio: np.ndarray, language: str | None,
                           timings: Timings | None = None) -> AsyncIterator[list[Word]]:
        """Each window's words on the file's clock (kept once, as in the transcript), in window order."""
        timings = timings or Timings()
        t0 = time.perf_counter()
        windows, clips = await asyncio.to_thread(_prepare, self.engine, audio)
        t1 = time.perf_counter()
        timings.plan_s, timings.windows = t1 - t0, len(windows)
        timings.voiced_s = sum(w.length for w in windows) / self.engine.sample_rate
        async with aclosing(self.batcher.stream(clips, language)) as results:
            k = 0
            async for words in results:
                yield place_words(windows[k], words, self.engine.sample_rate)
                k += 1
        timings.asr_s = time.perf_counter() - t1

    async def transcribe_decode(self, decode: DecodeStream, language: str | None,
                                timings: Timings | None = None) -> Transcript:
        """A file's transcript while it decodes: each range is planned as it arrives (``PlanStream``)
        and its final windows go to the batcher at once, so the engine starts on an hour-long file
        after its first range. The same windows, hence the same transcript, as ``transcribe_audio``
        of the decoded file. Errors of the decode (``AudioFileError``) are raised here."""
        timings = timings or Timings()
        windows: list[Window] = []
        t0 = time.perf_counter()

        async def parts() -> AsyncIterator[list[np.ndarray]]:
            async with aclosing(_planned(decode, self.engine, timings, t0)) as planned:  # stops the thread
                async for part in planned:
                    windows.extend(part)
                    yield [w.audio(decode.audio) for w in part]

        words = [ws async for ws in self.batcher.stream_parts(parts(), language)]
        timings.asr_s = time.perf_counter() - t0 - timings.decode_s
        timings.windows = len(windows)
        timings.voiced_s = sum(w.length for w in windows) / self.engine.sample_rate
        return _finish(self.engine, windows, words, len(decode.audio), language)

    async def transcribe_file(self, path: str | Path, language: str | None,
                              timings: Timings | None = None) -> Transcript:
        timings = timings or Timings()
        t0 = time.perf_counter()
        audio = await asyncio.to_thread(decode_file, path, self.engine.sample_rate)
        timings.decode_s = time.perf_counter() - t0
        return await self.transcribe_audio(audio, language, timings)

    def close(self) -> None:
        self.batcher.close()


async def _planned(decode: DecodeStream, engine: WindowEngine, timings: Timings,
                   t0: float) -> AsyncIterator[list[Window]]:
    """The final windows of each decoded range, decoded and planned on a thread off the event loop."""
    loop = asyncio.get_running_loop()
    out: asyncio.Queue[Any] = asyncio.Queue()
    stop = threading.Event()

    def work() -> None:
        try:
            planner = PlanStream(engine.sample_rate, engine.plan)
            for n in decode:
                if stop.is_set():
                    return
                t = time.perf_counter()
                part = planner.feed(decode.audio, n)
                timings.plan_s += time.perf_counter() - t
                if part:
                    loop.call_soon_threadsafe(out.put_nowait, part)
            timings.decode_s = time.perf_counter() - t0
            t = time.perf_counter()
            part = planner.finish(decode.audio)
            timings.plan_s += time.perf_counter() - t
            loop.call_soon_threadsafe(out.put_nowait, part)
            loop.call_soon_threadsafe(out.put_nowait, None)
        except BaseException as exc:  # noqa: BLE001  (handed to the loop, raised there)
            loop.call_soon_threadsafe(out.put_nowait, exc)

    job = loop.run_in_executor(None, work)
    try:
        while (part := await out.get()) is not None:
            if isinstance(part, BaseException):
                raise part
            yield part
    finally:
        stop.set()  # the thread stops after the range in progress
        job.add_done_callback(lambda f: f.exception())  # retrieved: nothing is logged for a request gone


def transcribe_corpus(engine: WindowEngine, audios: Sequence[np.ndarray], language: str | None,
                      max_batch: int | None = None,
                      progress: Callable[[int, int], None] | None = None) -> list[Transcript]:
    """Transcripts of several decoded files, their windows batched together by length.

    ``progress(done, total)`` is called with the windows transcribed so far after each batch.
    """
    prepared = [_prepare(engine, a) for a in audios]
    flat = [(f, k) for f, (_, clips) in enumerate(prepared) for k in range(len(clips))]
    clips = [prepared[f][1][k] for f, k in flat]
    words: list[list[Word]] = [[] for _ in flat]
    done = 0
    for batch in length_batches([len(c) for c in clips], max_batch or engine.max_batch):
        for i, ws in zip(batch, engine.transcribe_windows([clips[i] for i in batch], language), strict=True):
            words[i] = ws
        done += len(batch)
        if progress:
            progress(done, len(clips))
    per_file: list[list[list[Word]]] = [[[] for _ in p[1]] for p in prepared]
    for (f, k), ws in zip(flat, words, strict=True):
        per_file[f][k] = ws
    return [_finish(engine, p[0], per_file[f], len(audios[f]), language) for f, p in enumerate(prepared)]
