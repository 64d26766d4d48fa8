"""A bot file with two tools on the embedded stack: a recorded request, the right tool call, its
result spoken.

The appointment desk example (``examples/appointment_desk.py``: two tools over SQLite, plus the
hang-up tool) answers the recorded phrase "Tuesday at three o'clock" (Asterisk prompts) through
the full cascade: Whisper, the real llama.cpp server, Piper. The 135M model cannot be trusted to
choose a tool, so the test forces the choice (``tool_choice="check_availability"``); the model
still fills the arguments (a grammar limits ``day`` to the five weekdays), and must pick Tuesday
from what it heard. The reply audio is transcribed again to check that the result was spoken.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
from pathlib import Path

import numpy as np
import pytest
import soxr
from aiohttp import web

from agent.bot_loader import load_bot
from agent.commands import _talk_once
from agent.config import load_config
from agent.transcripts import _BACKGROUND
from testkit.talk_clips import recorded_phrase

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


def transcribe(pcm: bytes, rate: int) -> str:
    from agent.models import resolve_whisper_path
    from asr.whisper_model import shared_whisper_model, transcribe_greedy

    config = load_config(None, [])
    audio = np.frombuffer(pcm, dtype="<i2").astype(np.float32) / 32768.0
    audio = soxr.resample(audio, rate, 16000).astype(np.float32)
    model = shared_whisper_model(resolve_whisper_path(config.asr), config.asr.device, config.asr.compute_type)
    return transcribe_greedy(model, audio, "en", 1.0)


def test_recorded_request_calls_the_tool_and_speaks_its_result(tmp_path, monkeypatch):
    monkeypatch.setenv("APPOINTMENTS_DB", str(tmp_path / "diary.sqlite"))
    bot = load_bot(ROOT / "examples" / "appointment_desk.py")
    assert {t.name for t in bot.tools} == {"check_availability", "book_appointment", "end_call"}
    bot.tool_choice = {"type": "function", "function": {"name": "check_availability"}}  # forced: 135M model
    # A long LLM timeout: grammar-constrained sampling is slow when the 2 CI cores are shared.
    config = bot.configure(load_config(None, ["call.greeting=", "llm.max_tokens=48", "llm.request_timeout_s=90",
                                              f"call.transcripts_dir={tmp_path / 'calls'}"]))
    clip = recorded_phrase(["digits/day-2", "digits/at", "digits/3", "digits/oclock"], config.audio.in_sample_rate)
    posted: list[dict] = []

    async def call_with_webhook():
        async def hook(request: web.Request) -> web.Response:
            posted.append(await request.json())
            return web.Response(status=204)

        app = web.Application()
        app.router.add_post("/calls", hook)
        runner = web.AppRunner(app)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        config.call.webhook_url = f"http://127.0.0.1:{runner.addresses[0][1]}/calls"
        try:
            result = await _talk_once(config, [clip.audio], bot, max_wait_s=120)
            await asyncio.wait_for(asyncio.gather(*_BACKGROUND), 30)
        finally:
            await runner.cleanup()
        return result

    result = asyncio.run(call_with_webhook())
    turn = result.turns[0]
    print(turn.transcript, result.tool_calls)
    assert "tuesday" in turn.transcript.lower(), turn.transcript
    assert [c["tool"] for c in result.tool_calls] == ["check_availability"], result.tool_calls
    call = result.tool_calls[0]
    assert call["arguments"] == {"day": "Tuesday"} and call["error"] is None, call
    assert call["result"] == "On Tuesday we have 9 am, 10 am, 11 am, 2 pm, 3 pm and 4 pm free."
    heard = transcribe(turn.reply_audio, result.out_sample_rate).lower()
    print("bot said:", heard)
    assert "tuesday" in heard and "free" in heard, heard
    with sqlite3.connect(tmp_path / "diary.sqlite") as db:  # the tool read the real diary file
        assert db.execute("SELECT COUNT(*) FROM slots WHERE patient IS NULL").fetchone()[0] == 30

    files = list((tmp_path / "calls").glob("*.jsonl"))
    assert len(files) == 1, files
    lines = [json.loads(x) for x in files[0].read_text().splitlines()]
    print(*lines, sep="\n")
    caller = [x for x in lines if x.get("speaker") == "caller"]
    tools = [x for x in lines if x.get("speaker") == "tool"]
    bot_lines = [x for x in lines if x.get("speaker") == "bot"]
    assert caller and "tuesday" in caller[0]["text"].lower() and caller[0]["t_end"] > caller[0]["t_start"] >= 0
    assert tools == [{**tools[0], "name": "check_availability", "arguments": {"day": "Tuesday"},
                      "result": call["result"]}]
    assert any(call["result"] in x["text"] for x in bot_lines), bot_lines
    assert all(x["t_end"] >= x["t_start"] for x in bot_lines)
    assert any(x.get("response_ms", 0) > 0 for x in bot_lines)
    assert lines[-1]["event"] == "call_end" and lines[-1]["duration_s"] > 0
    assert len(posted) == 1 and posted[0]["lines"] == lines and posted[0]["call_id"] == lines[0]["call_id"]
