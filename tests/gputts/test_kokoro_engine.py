"""The Kokoro engine streams clause by clause, batches concurrent callers, and forgets callers who leave."""

from __future__ import annotations

import asyncio
import shutil

import numpy as np
import pytest

from tts.kokoro.g2p import CharG2P, espeak_to_kokoro, to_ids
from tts.kokoro.text import clauses, split_ids

THREE_CLAUSES = "Sure, I can help. Your order ships today. It should arrive on Friday."


async def _wait(predicate, timeout: float = 20.0) -> None:
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while not predicate():
        assert loop.time() < end, "timed out"
        await asyncio.sleep(0.01)


def test_clauses_first_is_short():
    assert clauses(THREE_CLAUSES, first_min_words=3) == ["Sure, I can help.", "Your order ships today.",
                                                         "It should arrive on Friday."]
    assert clauses("Well, thank you for calling the support line today, how are you?", first_min_words=4) == [
        "Well, thank you for calling the support line today,", "how are you?"]
    assert clauses("Dr. Smith paid $3.50 today. Bye.") == ["Dr. Smith paid $3.50 today.", "Bye."]
    unpunctuated = clauses(" ".join(f"w{i}" for i in range(60)))  # no mark to cut at: word boundaries
    assert [len(c.split()) for c in unpunctuated] == [12, 24, 24]
    assert split_ids([1, 16, 2, 3, 16, 4, 5, 6], 4) == [[1, 16, 2, 3], [4, 5, 6]]


def test_espeak_ipa_becomes_kokoro_symbols():
    assert espeak_to_kokoro("həlˈo^ʊ wˈɜːld") == "həlˈO wˈɜɹld"
    assert espeak_to_kokoro("a^ɪd lˈa^ɪk t^ʃˈiːz") == "Id lˈIk ʧˈiz"
    assert espeak_to_kokoro("bˈʌɾɚ") == "bˈʌTəɹ"
    assert CharG2P().phonemes("Big  Dog!") == "biɡ doɡ!"


@pytest.mark.skipif(not shutil.which("espeak-ng"), reason="Debian espeak-ng not installed")
def test_espeak_phonemes_keep_punctuation(engine):
    from tts.kokoro.g2p import EspeakG2P

    ps = EspeakG2P().phonemes("Hello world, how are you today?")
    assert ps == "həlˈO wˈɜɹld, hˌW ɑɹ ju tədˈA?"
    assert len(to_ids(ps, engine.model.vocab)) == len(ps)  # every symbol is in Kokoro's vocabulary


async def test_streams_first_clause_before_the_rest_is_synthesized(engine):
    before = engine.batcher.stats.utterances
    stream = engine.synthesize_stream(THREE_CLAUSES)
    first = await stream.__anext__()
    # the first clause came back with one clause of look-ahead: the second is queued, running or (on a loaded box,
    # where this coroutine resumes late) done; the third is not even asked for until the second is taken
    assert 1 <= engine.batcher.stats.utterances - before <= 2
    assert engine.batcher.pending + engine.batcher.in_flight <= 1
    rest = [piece async for piece in stream]
    assert len(rest) == 2 and engine.batcher.stats.utterances - before == 3
    expected = [len(u.ids) for u in engine.utterances(THREE_CLAUSES)]
    assert len(expected) == 3
    assert all(len(p) > 0 and len(p) % 1200 == 0 for p in [first, *rest])  # 600 samples a frame, 16-bit


async def test_concurrent_requests_share_one_tick(engine):
    texts = [f"Caller {n} asks about the order." for n in range(6)]
    ticks = engine.batcher.stats.ticks
    outputs = await _in_one_tick(engine, texts)
    assert engine.batcher.stats.ticks == ticks + 1
    assert engine.batcher.stats.last_batch == len(texts)
    assert all(len(out) == 1 and len(out[0]) > 0 for out in outputs)


async def test_urgent_requests_go_first_without_longer_waiting_ones(engine):
    import time

    ids = engine.phoneme_ids("One moment please.")
    long_ids = engine.phoneme_ids("One moment please, I am looking up your order and the delivery date now.")
    ticks = engine.batcher.stats.ticks
    with engine.batcher.held():
        later = engine.batcher.enqueue(engine.utterance(long_ids), deadline=time.monotonic() + 30)  # still playing
        rider = engine.batcher.enqueue(engine.utterance(ids), deadline=time.monotonic() + 30)
        first = [engine.batcher.enqueue(engine.utterance(ids)) for _ in range(3)]  # due now
    await asyncio.gather(*(r.future for r in first), rider.future)
    # the waiting clause no longer than the urgent ones rode along (no padding); the long one waited
    assert engine.batcher.stats.ticks == ticks + 1 and engine.batcher.stats.last_batch == 4
    await later.future  # nothing urgent left: the GPU works ahead on what can wait
    assert engine.batcher.stats.ticks == ticks + 2 and engine.batcher.stats.last_batch == 1


async def test_work_ahead_ticks_stop_at_their_phoneme_cap(engine):
    import time

    ids = engine.phoneme_ids("One moment please.")
    batcher = engine.batcher
    batcher.work_ahead_phonemes = 2 * len(ids)
    try:
        ticks = batcher.stats.ticks
        with batcher.held():  # five later clauses, nobody waiting: the GPU works ahead two clauses a tick
            later = [batcher.enqueue(engine.utterance(ids), deadline=time.monotonic() + 30) for _ in range(5)]
        for request in later:
            await request.future
        assert batcher.stats.ticks == ticks + 3 and batcher.stats.last_batch == 1  # 2 + 2 + 1
        with batcher.held():  # due now: first clauses are not capped
            firsts = [batcher.enqueue(engine.utterance(ids)) for _ in range(5)]
        for request in firsts:
            await request.future
        assert batcher.stats.ticks == ticks + 4 and batcher.stats.last_batch == 5
    finally:
        batcher.work_ahead_phonemes = 0


async def test_batched_audio_equals_alone(engine):
    ids = [engine.phoneme_ids(t) for t in ("Good morning.", "Thanks for waiting, one moment please.")]
    alone = [await engine.batcher.synthesize(engine.utterance(i, seed=9)) for i in ids]
    with engine.batcher.held():
        requests = [engine.batcher.enqueue(engine.utterance(i, seed=9)) for i in ids]
    together = [await r.future for r in requests]
    assert engine.batcher.stats.last_batch == 2
    for a, b in zip(alone, together, strict=True):
        assert np.abs(a - b).max() < 1e-4


async def test_vanished_client_leaves_no_pending_work(engine):
    cancelled = engine.batcher.stats.cancelled
    with engine.batcher.held():  # the caller is waiting in the queue when it goes away
        task = asyncio.ensure_future(_collect(engine, THREE_CLAUSES))
        await _wait(lambda: engine.batcher.pending == 1)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert engine.batcher.pending == 0
    assert engine.batcher.stats.cancelled == cancelled + 1

    # barge-in after the first clause: closing the stream withdraws the clause it had queued (if the
    # worker has not taken it yet; a clause already on the GPU finishes and is dropped)
    stream = engine.synthesize_stream(THREE_CLAUSES)
    assert await stream.__anext__()
    cancelled, queued = engine.batcher.stats.cancelled, engine.batcher.pending
    await stream.aclose()
    assert engine.batcher.pending == 0
    assert engine.batcher.stats.cancelled == cancelled + queued
    await _wait(lambda: engine.batcher.in_flight == 0)

    # the batcher keeps serving
    assert len(await _collect(engine, "Still here.")) == 1


def test_sync_protocol_from_a_thread(engine):
    assert engine.name == "kokoro" and engine.sample_rate == 24000
    pieces = list(engine.synthesize("Hello there. Goodbye now."))
    assert len(pieces) == 2 and all(len(p) % 2 == 0 and p for p in pieces)


def test_create_engine_selects_kokoro():
    from types import SimpleNamespace

    from tts.engines import create_engine
    from tts.kokoro.options import KokoroOptions

    config = SimpleNamespace(engine="kokoro", voice="", speed=1.0, sample_rate=0,
                             kokoro=KokoroOptions(tiny=True, device="cpu", g2p="chars", max_batch=4))
    engine = create_engine(config)
    try:
        assert engine.name == "kokoro" and engine.memory.warmup_batch == 1  # warmed at start, batch 1 on the CPU
        assert list(engine.synthesize("ok."))
    finally:
        engine.close()


async def _collect(engine, text: str) -> list[bytes]:
    return [piece async for piece in engine.synthesize_stream(text)]


async def _in_one_tick(engine, texts: list[str]) -> list[list[bytes]]:
    """Each text's pieces, every first clause queued before the batcher may take any (one tick's batch)."""
    with engine.batcher.held():
        tasks = [asyncio.ensure_future(_collect(engine, t)) for t in texts]
        await _wait(lambda: engine.batcher.pending == len(texts))
    return await asyncio.gather(*tasks)


async def test_a_batch_that_runs_out_of_device_memory_is_split_and_every_caller_still_heard(engine, monkeypatch):
    """Run 57: a batch of 64 ran out of Kokoro's GPU share and failed all 64 callers' clauses. A batch the device has
    no memory for is now synthesized in halves; a single clause that cannot fit fails alone."""
    import torch

    real = engine.batcher.model.synthesize
    sizes: list[int] = []

    def tight(items, **kwargs):  # a device that holds at most two clauses at a time
        sizes.append(len(items))
        if len(items) > 2:
            raise torch.OutOfMemoryError("CUDA out of memory (test)")
        return real(items, **kwargs)

    monkeypatch.setattr(engine.batcher.model, "synthesize", tight)
    texts = [f"Caller {n} asks about the order." for n in range(5)]
    splits = engine.batcher.stats.oom_splits
    outputs = await _in_one_tick(engine, texts)
    assert all(len(out) == 1 and len(out[0]) > 0 for out in outputs)
    assert sizes == [5, 2, 3, 1, 2] and engine.batcher.stats.oom_splits - splits == 2  # 5 -> 2 + 3 -> 2 + (1 + 2)
