"""The cross-request batcher on the real Whisper engine: length grouping, fairness, no cross-talk."""

from __future__ import annotations

import asyncio
import threading

import numpy as np
import pytest

from asr.offline.results import Word
from asr.offline.window_batcher import WindowBatcher, length_batches
from testkit.corpus import wer


class RecordingEngine:
    """The real engine, recording each batch; the first call waits until every request is queued."""

    def __init__(self, engine, pack: bool) -> None:  # type: ignore[no-untyped-def]
        self.engine = engine
        self.name, self.sample_rate, self.plan = engine.name, engine.sample_rate, engine.plan
        self.max_batch, self.languages = engine.max_batch, engine.languages
        self.fixed_window_s = engine.fixed_window_s if pack else None
        self.batches: list[list[int]] = []
        self.release = threading.Event()

    def transcribe_windows(self, windows: list[np.ndarray], language: str | None) -> list[list[Word]]:
        self.release.wait(30)
        self.batches.append([len(w) for w in windows])
        return self.engine.transcribe_windows(windows, language)


@pytest.fixture(scope="module")
def whisper():  # type: ignore[no-untyped-def]
    from agent.models import resolve_engine_spec
    from asr.offline.engine_factory import make_engine
    from asr.offline.window_engine import EngineSpec

    return make_engine(resolve_engine_spec(EngineSpec(pack=True)))


def test_length_batches_groups_similar_lengths() -> None:
    assert length_batches([5, 100, 6, 99, 7], 2) == [[0, 2], [4, 3], [1]]


def test_windows_of_many_requests_share_batches_by_length(whisper) -> None:  # type: ignore[no-untyped-def]
    from testkit.offline_audio import prompt_clips, speech_track

    short = [c for c in prompt_clips() if 1.5 * 16000 < len(c[0]) < 3.5 * 16000 ][:6]
    long = [speech_track(10, seed=k)[0] for k in range(3)]
    requests = {  # six short windows and three long ones, spread over three requests
        "A": [short[0], short[1], (long[0], None)],
        "B": [(long[1], None), short[2]],
        "C": [short[3], short[4], (long[2], None), short[5]],
    }
    engine = RecordingEngine(whisper, pack=False)  # as for an engine whose cost follows the length
    batcher = WindowBatcher(engine, max_batch=3)

    async def run() -> dict[str, list[list[Word]]]:
        tasks = {k: asyncio.create_task(batcher.transcribe([w for w, _ in v], "en")) for k, v in requests.items()}
        await asyncio.sleep(0.2)
        engine.release.set()
        return {k: await t for k, t in tasks.items()}

    try:
        results = asyncio.run(run())
    finally:
        batcher.close()
    assert sorted(sum(engine.batches, [])) == sorted(len(w) for v in requests.values() for w, _ in v)
    # Three full batches, each of one length class, though no request had three of a kind in a row.
    assert len(engine.batches) == 3 and all(len(b) == 3 for b in engine.batches), engine.batches
    for sizes in engine.batches:
        assert max(sizes) - min(sizes) < 4 * 16000, engine.batches
    for key, windows in requests.items():  # every request got its own words back, as if alone
        for (audio, ref), words in zip(windows, results[key], strict=True):
            alone = "".join(w.text for w in whisper.transcribe_windows([audio], "en")[0])
            assert "".join(w.text for w in words) == alone
            if ref is not None:
                assert wer(ref, alone) < 0.7, (ref, alone)
    assert all(len(results[k][i]) > 10 for k, i in (("A", 2), ("B", 0), ("C", 2)))  # the long ones too


def test_short_windows_of_many_requests_are_packed_into_one_whisper_input(whisper) -> None:  # type: ignore[no-untyped-def]
    from testkit.offline_audio import prompt_clips

    clips = [c for c in prompt_clips() if 2 * 16000 < len(c[0]) < 5 * 16000 and len(c[1].split()) >= 5][:6]
    engine = RecordingEngine(whisper, pack=True)
    batcher = WindowBatcher(engine, max_batch=8)

    async def run() -> list[list[list[Word]]]:
        tasks = [asyncio.create_task(batcher.transcribe([audio], "en")) for audio, _ in clips]
        await asyncio.sleep(0.2)
        engine.release.set()
        return list(await asyncio.gather(*tasks))

    try:
        results = asyncio.run(run())
    finally:
        batcher.close()
    assert len(engine.batches) == 1 and len(engine.batches[0]) == 1  # six requests, one 30 s input
    assert engine.batches[0][0] <= 30 * 16000
    for (audio, ref), (words,) in zip(clips, results, strict=True):
        text = "".join(w.text for w in words)
        assert wer(ref, text) < 0.34, (ref, text)
        assert all(0.0 <= w.start <= w.end <= len(audio) / 16000 for w in words), (len(audio) / 16000, words)


def test_a_corpus_of_short_files_is_packed_too(whisper) -> None:  # type: ignore[no-untyped-def]
    from asr.offline.transcriber import transcribe_corpus
    from testkit.offline_audio import prompt_clips

    clips = [c for c in prompt_clips() if len(c[1].split()) >= 6][:5]
    engine = RecordingEngine(whisper, pack=True)
    engine.max_batch = 1  # one 30 s input per call: the packing loop must come back for the rest
    engine.release.set()
    transcripts = transcribe_corpus(engine, [a for a, _ in clips], "en")
    assert len(engine.batches) < len(clips)
    assert all(len(b) == 1 and b[0] <= 30 * 16000 for b in engine.batches)
    for (_, ref), t in zip(clips, transcripts, strict=True):
        assert wer(ref, t.text) < 0.34, (ref, t.text)


def test_packing_is_opt_in(whisper) -> None:  # type: ignore[no-untyped-def]
    from agent.models import resolve_engine_spec
    from asr.offline.engine_factory import make_engine
    from asr.offline.window_engine import EngineSpec

    assert whisper.fixed_window_s == 30.0
    assert make_engine(resolve_engine_spec(EngineSpec())).fixed_window_s is None  # off by default
    assert whisper.fixed_window_s == 30.0  # the shared model's other engines keep packing
