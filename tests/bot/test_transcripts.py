"""Transcript webhooks against a real local HTTP server: retried, and never holding up the call."""

from __future__ import annotations

import asyncio
import json
import time

from aiohttp import web

from agent.transcripts import CallTranscript, post_webhook


async def _server(handler) -> tuple[web.AppRunner, str]:
    app = web.Application()
    app.router.add_post("/hook", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    return runner, f"http://127.0.0.1:{port}/hook"


def test_webhook_is_retried_until_the_receiver_takes_it():
    async def main() -> tuple[bool, list[dict]]:
        got: list[dict] = []

        async def hook(request: web.Request) -> web.Response:
            got.append(await request.json())
            return web.Response(status=503 if len(got) < 3 else 204)

        runner, url = await _server(hook)
        try:
            ok = await post_webhook(url, {"call_id": "c1"}, attempts=4, first_backoff_s=0.05)
        finally:
            await runner.cleanup()
        return ok, got

    ok, got = asyncio.run(main())
    assert ok and len(got) == 3 and all(g == {"call_id": "c1"} for g in got)


def test_webhook_gives_up_on_a_client_error_and_a_dead_address():
    async def main() -> tuple[bool, bool, int]:
        calls = 0

        async def hook(_request: web.Request) -> web.Response:
            nonlocal calls
            calls += 1
            return web.Response(status=400)

        runner, url = await _server(hook)
        try:
            refused = await post_webhook(url, {}, attempts=4, first_backoff_s=0.01)
        finally:
            await runner.cleanup()
        dead = await post_webhook(url, {}, attempts=2, first_backoff_s=0.01, timeout_s=1.0)  # nothing listens now
        return refused, dead, calls

    refused, dead, calls = asyncio.run(main())
    assert (refused, dead, calls) == (False, False, 1)


def test_call_end_does_not_wait_for_a_slow_receiver(tmp_path):
    async def main() -> tuple[float, list[dict]]:
        got: list[dict] = []

        async def hook(request: web.Request) -> web.Response:
            await asyncio.sleep(1.0)
            got.append(await request.json())
            return web.Response(status=200)

        runner, url = await _server(hook)
        try:
            transcript = CallTranscript("call-7", tmp_path, url)
            transcript._emit({"speaker": "caller", "text": "hello", "t_start": 0.1, "t_end": 0.9})
            t0 = time.monotonic()
            transcript.finish("the caller hung up")
            blocked = time.monotonic() - t0
            assert transcript.delivery is not None
            await transcript.delivery
        finally:
            await runner.cleanup()
        return blocked, got

    blocked, got = asyncio.run(main())
    assert blocked < 0.05
    assert got[0]["call_id"] == "call-7" and got[0]["ended_by"] == "the caller hung up"
    lines = [json.loads(x) for x in (tmp_path / "call-7.jsonl").read_text().splitlines()]
    assert lines[0]["text"] == "hello" and lines[-1]["event"] == "call_end"
    assert got[0]["lines"] == lines
