"""An LLM server that cannot be reached: a clear log line, a spoken apology, the session stays up."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from agent.llm_server import free_port
from testkit.corpus import pick
from testkit.servers import cadence_serve
from tests.test_webrtc_e2e import _say_and_wait_reply, _wait_quiet
from transports.audio_io import load_audio
from transports.webrtc_client import WebRTCCaller


@pytest.fixture(scope="module")
def server_without_llm():
    dead = f"http://127.0.0.1:{free_port()}/v1"  # nothing listens here
    with cadence_serve(f"llm.base_url={dead}", "llm.model=none") as srv:
        yield srv


async def test_caller_hears_an_apology_and_can_try_again(server_without_llm):
    url = server_without_llm["url"]
    caller = WebRTCCaller(url)
    await caller.connect()
    try:
        for name in ("auth-thankyou", "agent-pass"):
            latency = await _say_and_wait_reply(caller, load_audio(pick([name])[0].path, 16000))
            assert latency < 8.0
            if name == "auth-thankyou":  # let the apology end before trying again (not after the last)
                await _wait_quiet(caller, 1.0, 20.0)
        eos = caller.mic.speech_end_times[0]
        reply = caller.received.audio_between(eos, eos + 60)
        assert int(np.abs(reply).max()) > 1000
        log = "".join(server_without_llm["log"])
        assert "LLM server unreachable" in log
        assert "the caller hears an apology and the session stays up" in log
        assert server_without_llm["proc"].poll() is None
    finally:
        await caller.close()
    await asyncio.sleep(0)
