"""``phone.output_frame_ms``: the bot's audio goes out in media messages of the configured length, in real time,
with nothing lost (a real WebSocket caller, the parrot bot's fixed reply)."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from testkit.phone_prompts import pcm8k, to_16k
from tests.phone.parrot import parrot_server
from transports.phone.loopback_caller import LoopbackCaller
from transports.phone.options import PhoneOptions

REPLY = "cannot-complete-as-dialed"  # 2.64 s


@pytest.mark.parametrize("frame_ms", [20.0, 40.0])
async def test_bot_audio_goes_out_in_messages_of_the_configured_length(frame_ms: float) -> None:
    options = PhoneOptions(output_frame_ms=frame_ms)
    async with parrot_server(to_16k(pcm8k(REPLY)), options=options) as (url, endpoint):
        caller = await LoopbackCaller(url).connect()
        eos = (await caller.say(pcm8k("auth-thankyou"))).last
        assert await caller.wait_reply(eos, timeout_s=10) is not None, "no reply"
        await asyncio.sleep(0.3)
        media = [(at, p) for at, p in caller.inbound.media if at >= eos]
        await caller.hang_up()
    size = int(8000 * frame_ms / 1000)  # mu-law bytes per message
    sizes = [len(p) for _, p in media]
    assert set(sizes[:-1]) == {size} and 0 < sizes[-1] <= size, sorted(set(sizes))
    duration = sum(sizes) / 8000
    assert duration == pytest.approx(2.64, abs=0.1)  # the whole reply, nothing lost
    arrivals = np.array([at for at, _ in media]) - media[0][0]
    span = arrivals[-1] + sizes[-1] / 8000
    lead = options.lead_ms / 1000
    assert duration - lead - frame_ms / 1000 - 0.03 <= span <= duration + 0.3, (span, duration)  # real time
    stats = endpoint.recent[-1].stats.as_dict()
    assert stats["chunks_out"] == len(media)
