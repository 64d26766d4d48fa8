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

    def __init__(self, engine) -> None:  # type: ignore[no-untyped-def]
        self.engine = engine
        self.name, self.sample_rate, self.plan = engine.name, engine.sample_rate, engine.plan
        self.max_batch, self.languages = engine.max_batch, engine.languages
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

    return make_engine(resolve_engine_spec(EngineSpec()))


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
    engine = RecordingEngine(whisper)
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


def test_no_window_of_many_short_requests_is_dropped(whisper) -> None:  # type: ignore[no-untyped-def]
    """Six short requests in one batch, two of them near-repeats: each gets its whole text back.

    These six prompts, packed back to back into one 30 s Whisper input (the removed ``--pack``),
    lost the fourth ("to decrease the audio volume from other participants" came back as "to"):
    Whisper skipped a sentence that repeated its neighbour's words. Each window is now its own input.
    """
    from testkit.offline_audio import prompt_clips

    clips = [c for c in prompt_clips() if 2 * 16000 < len(c[0]) < 5 * 16000 and len(c[1].split()) >= 5][30:36]
    assert len(clips) == 6
    engine = RecordingEngine(whisper)
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
    assert len(engine.batches) == 1 and sorted(engine.batches[0]) == sorted(len(a) for a, _ in clips)
    assert batcher.stats.inputs == batcher.stats.windows == 6  # one engine input per window
    for (audio, ref), (words,) in zip(clips, results, strict=True):
        text = "".join(w.text for w in words)
        assert wer(ref, text) < 0.34, (ref, text)  # nothing dropped: each prompt's words are all there
        assert all(0.0 <= w.start <= w.end <= len(audio) / 16000 for w in words), (len(audio) / 16000, words)


def test_packing_is_gone(whisper) -> None:  # type: ignore[no-untyped-def]
    from asr.offline.window_engine import EngineSpec

    assert not hasattr(whisper, "fixed_window_s")
    assert "pack" not in EngineSpec.__dataclass_fields__
