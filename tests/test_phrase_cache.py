"""The bot's fixed phrases are synthesized once per process (``tts/phrase_cache.py``): real Piper behind
``CadenceTTSService``, counted by a pass-through wrapper around the engine."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

from pipecat.frames.frames import InterruptionFrame, TTSAudioRawFrame, TTSSpeakFrame
from pipecat.tests.utils import SleepFrame, run_test

from agent.config import load_config
from agent.pipeline import fixed_phrases
from tts.engines import TTSEngine, create_engine
from tts.phrase_cache import PhraseCache, phrase_cache_for
from tts.service import CadenceTTSService

GREETING = "Thanks for calling the clinic. How can I help you today?"


class Counted:
    """The real engine, counting its syntheses per text."""

    def __init__(self, engine: TTSEngine) -> None:
        self.engine, self.calls = engine, []
        self.name, self.sample_rate = engine.name, engine.sample_rate

    def synthesize(self, text: str) -> Iterator[bytes]:
        self.calls.append(text)
        return self.engine.synthesize(text)


def _audio(frames) -> bytes:
    return b"".join(f.audio for f in frames if isinstance(f, TTSAudioRawFrame))


async def _say(service: CadenceTTSService, text: str) -> bytes:
    down, _ = await run_test(service, frames_to_send=[TTSSpeakFrame(text), SleepFrame(sleep=0.5)])
    return _audio(down)


def test_a_fixed_phrase_is_synthesized_once_and_replayed():
    engine = Counted(create_engine(load_config(None).tts))
    cache = PhraseCache([GREETING])
    first = asyncio.run(_say(CadenceTTSService(engine, phrase_cache=cache), GREETING))
    second = asyncio.run(_say(CadenceTTSService(engine, phrase_cache=cache), GREETING))  # another call
    assert first and second == first
    assert engine.calls == [GREETING] and cache.hits == 1 and cache.stored == 1
    other = "This sentence is an answer, not a fixed phrase."
    asyncio.run(_say(CadenceTTSService(engine, phrase_cache=cache), other))
    asyncio.run(_say(CadenceTTSService(engine, phrase_cache=cache), other))
    assert engine.calls == [GREETING, other, other]  # replies are never cached


def test_a_phrase_cut_short_is_not_kept():
    engine = Counted(create_engine(load_config(None).tts))
    cache = PhraseCache([GREETING])
    frames = [TTSSpeakFrame(GREETING), SleepFrame(sleep=0.01), InterruptionFrame(), SleepFrame(sleep=0.3)]
    asyncio.run(run_test(CadenceTTSService(engine, phrase_cache=cache), frames_to_send=frames))
    assert engine.calls == [GREETING] and cache.stored == 0
    asyncio.run(_say(CadenceTTSService(engine, phrase_cache=cache), GREETING))
    assert engine.calls == [GREETING, GREETING] and cache.stored == 1


def test_one_cache_per_engine_knows_the_configured_phrases():
    config = load_config(None, [f"call.greeting={GREETING}"])
    engine = Counted(create_engine(config.tts))
    cache = phrase_cache_for(engine, fixed_phrases(config))
    assert cache is phrase_cache_for(engine, [])
    assert all(cache.wants(p) for p in (GREETING, config.call.goodbye, config.llm.apology, config.call.idle_prompt))
    assert not cache.wants("Hello.")
