"""``stream=true``: the transcript as server-sent events, OpenAI's ``transcript.text.*`` events.

A ``transcript.text.delta`` goes out as each window finishes, once every window before it has
(the deltas join to the final text); ``transcript.text.done`` carries the whole text at the end.
Nothing is sent before the first window is done, so a failure up to then is still a JSON error
with its status; a failure after that is an ``error`` event (which OpenAI's SDK raises). A client
that goes away is noticed within ``POLL_S`` even between windows: its remaining windows are
withdrawn from the batcher and the handler ends quietly.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import aclosing
from typing import TypeVar

import numpy as np
from aiohttp import web

from asr.offline.text_stream import TextStream, delta_event, done_event, sse
from asr.offline.transcriber import OfflineTranscriber, Timings

log = logging.getLogger("cadence.transcribe_server")

POLL_S = 0.25  # how often a stream waiting on the engine checks that its client is still there

T = TypeVar("T")


class ClientGone(ConnectionResetError):
    """The client closed the connection of a streamed response."""


def client_gone(request: web.Request) -> bool:
    transport = request.transport
    return transport is None or transport.is_closing()


async def watched(request: web.Request, items: AsyncIterator[T]) -> AsyncIterator[T]:
    """``items``, raising ``ClientGone`` as soon as the client disconnects while waiting for the next."""
    while True:
        step = asyncio.ensure_future(anext(items))
        while not (await asyncio.wait({step}, timeout=POLL_S))[0]:
            if client_gone(request):
                step.cancel()
                await asyncio.gather(step, return_exceptions=True)
                raise ClientGone("the client closed the connection")
        try:
            yield step.result()
        except StopAsyncIteration:
            return


async def stream_transcript(request: web.Request, transcriber: OfflineTranscriber, audio: np.ndarray,
                            language: str | None, timings: Timings) -> web.StreamResponse:
    """Transcribe ``audio`` and stream its text; returns the finished (or abandoned) response."""
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache",
                                           "X-Accel-Buffering": "no"})
    text = TextStream()
    duration = len(audio) / transcriber.engine.sample_rate
    try:
        async with aclosing(transcriber.stream_audio(audio, language, timings)) as windows, \
                aclosing(watched(request, windows)) as results:
            async for words in results:
                delta = text.add(words)
                if not response.prepared:
                    await response.prepare(request)
                if delta:
                    await response.write(delta_event(delta))
        done = text.transcript(duration, language or "en").text
        if not response.prepared:
            await response.prepare(request)
        if done != text.sent:
            log.warning("streamed text is not a prefix of the transcript; the done event corrects it")
        await response.write(done_event(done))
        await response.write_eof()
    except ConnectionResetError:  # ClientGone, or a write to a closed connection
        log.info("a streaming client went away; its remaining windows were withdrawn")
    except Exception as exc:
        if not response.prepared:
            raise  # still a JSON error with its status
        log.exception("streamed transcription failed")
        await _try_write(response, sse({"type": "error", "error": {
            "message": f"internal error while transcribing: {type(exc).__name__}; see the server log",
            "type": "server_error", "param": None, "code": None}}))
    return response


async def _try_write(response: web.StreamResponse, data: bytes) -> None:
    try:
        await response.write(data)
        await response.write_eof()
    except ConnectionResetError:
        pass
