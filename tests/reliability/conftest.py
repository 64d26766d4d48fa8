"""The reliability suite: hostile-but-fair clients on loopback, bounded in count and time.

The tests that run whole sessions share the real engines of ``tests/conftest.py`` (embedded llama.cpp
server, Whisper, Piper, VAD) with the ops suite; the rest need no models.
"""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import HealthCheck, settings

from tests.reliability.helpers import real_offer

# Property tests: few examples, no deadline (a loaded 2-core CI box), the suite stays < 3 min.
settings.register_profile("reliability", max_examples=40, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
settings.load_profile("reliability")


@pytest.fixture(scope="session")
def offer_sdp() -> str:
    """A complete SDP offer from a real aiortc peer."""
    return asyncio.run(real_offer())


@pytest.fixture(scope="session")
def whisper_engine():
    """The real embedded Whisper (tiny.en), one window per engine call."""
    from agent.models import resolve_engine_spec
    from asr.offline.engine_factory import make_engine
    from asr.offline.window_engine import EngineSpec

    return make_engine(resolve_engine_spec(EngineSpec(engine="whisper", max_batch=1)))


@pytest.fixture
def whisper_transcriber(whisper_engine):
    """A fresh ``OfflineTranscriber`` (a server's cleanup closes its batcher) on the shared engine."""
    from asr.offline.transcriber import OfflineTranscriber

    transcriber = OfflineTranscriber(whisper_engine, 1)
    yield transcriber
    transcriber.close()
