"""A bot's call lifecycle on the phone line of a real ``cadence serve --bot`` process.

Two calls at once on one server (nothing but the server is shared, so neither waits for the other):
a silent caller hears the greeting, one idle prompt, then the goodbye, and the bot closes the media
stream (close code 1000, "call ended by the bot"); a caller who speaks gets the hang-up tool (forced:
the 135M model cannot be trusted to choose it), hears the goodbye, and the stream is closed the same way.
Both transcripts end with the bot's reason.
"""

from __future__ import annotations

import asyncio
import json
import time

import pytest

from testkit.corpus import pick
from testkit.servers import cadence_process
from transports.audio_io import load_audio, to_pcm16
from transports.phone.loopback_caller import LoopbackCaller

pytestmark = pytest.mark.slow

BOT = """
from agent.bot import Bot
bot = Bot("You are a test line.", greeting="Hello there.", goodbye="Goodbye now.", idle_after_s=1.5,
          idle_prompt="Are you still there?", hang_up_tool=True, tool_choice="end_call",
          transcripts_dir={dir!r}, settings={{"call.idle_prompts": 1, "llm.request_timeout_s": 60,
                                                 "admission.budget_gate": False}})  # shared CI cores
"""


def stretches(caller: LoopbackCaller, gap_s: float = 0.5) -> list[tuple[float, float]]:
    """The bot's voiced stretches as the caller heard them (arrival times)."""
    out: list[tuple[float, float]] = []
    for at, payload in caller.inbound.media:
        if not caller.voiced(payload):
            continue
        if out and at - out[-1][1] <= gap_s:
            out[-1] = (out[-1][0], at)
        else:
            out.append((at, at))
    return out


def test_idle_prompt_hang_up_tool_and_the_closed_stream(tmp_path):
    bot_file = tmp_path / "bot.py"
    calls = tmp_path / "calls"
    bot_file.write_text(BOT.format(dir=str(calls)))
    speech = to_pcm16(load_audio(pick(["agent-pass"])[0].path, 8000))

    async def silent(ws: str) -> LoopbackCaller:
        caller = await LoopbackCaller(ws).connect()
        assert await caller.wait_closed(60), "the bot never hung up on a silent caller"
        return caller

    async def talker(ws: str) -> tuple[LoopbackCaller, float]:
        caller = await LoopbackCaller(ws).connect()
        await caller.wait_reply(0.0, timeout_s=30)  # the greeting
        spoken = await caller.say(speech)
        assert await caller.wait_closed(120), "the hang-up tool did not end the call"
        return caller, spoken.last

    async def both(ws: str) -> tuple[LoopbackCaller, tuple[LoopbackCaller, float]]:
        return await asyncio.gather(silent(ws), talker(ws))

    with cadence_process(["serve", "--bot", str(bot_file), "--port", "0", "--log-level", "DEBUG"],
                         r"Cadence is ready: open (http://\S+?)/ ") as srv:
        ws = srv["url"].replace("http://", "ws://") + "/phone/ws"
        t0 = time.monotonic()
        first, (second, said_at) = asyncio.run(both(ws))
    heard = stretches(first)
    assert len(heard) >= 3, heard  # greeting, idle prompt, goodbye
    assert heard[1][0] - heard[0][1] >= 1.4  # the prompt came after the idle wait, not at once
    assert first.close_code == 1000 and "by the bot" in first.close_reason, (first.close_code, first.close_reason)
    assert second.close_code == 1000 and "by the bot" in second.close_reason
    assert any(start > said_at for start, _ in stretches(second)), "no goodbye after the caller spoke"
    ends = [json.loads(p.read_text().splitlines()[-1]) for p in sorted(calls.glob("*.jsonl"))]
    assert sorted(e["ended_by"] for e in ends) == ["the bot hung up", "the caller stayed silent"], ends
    assert time.monotonic() - t0 < 300
