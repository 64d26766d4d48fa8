"""An OpenAI-compatible transcription server: ``POST /v1/audio/transcriptions``.

Takes what OpenAI's API takes (multipart ``file``, ``model``, ``response_format``,
``language``, ``timestamp_granularities[]``; ``prompt`` and ``temperature`` are accepted and
ignored: decoding is greedy and unprompted) and answers in its formats, with its error
shape. Unlike OpenAI's 25 MB cap, hour-long files go in one request: the upload streams to
disk under a configurable byte limit, decoding is native and parallel, and the windows of
every request in flight share the engine through the batcher.

Nothing outlives its client: the upload's temporary file is removed on every path, and a client
that disconnects while its audio is being transcribed has its windows withdrawn from the batcher.
With an ``api_key``, ``/v1/*`` needs ``Authorization: Bearer KEY`` (``/health`` stays open).
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import logging
import os
import signal
from collections.abc import Awaitable
from dataclasses import dataclass
from functools import partial
from typing import Any, TypeVar

from aiohttp import web

from asr.offline.audio_budget import AudioBudget
from asr.offline.decode import (
    MIN_SAMPLE_RATE,
    AudioInfo,
    AudioTooLongError,
    PcmLayout,
    check_header,
    decode_file,
    open_arriving,
    open_decode,
    plausible_seconds,
    probe,
    wav_head,
)
from asr.offline.errors import ApiError
from asr.offline.formats import RESPONSE_FORMATS, render
from asr.offline.inflight import LocalInflight
from asr.offline.memory_audio import INLINE_SAMPLES, decode_memory_audio
from asr.offline.server_stream import POLL_S, ClientGone, client_gone, stream_transcript
from asr.offline.transcriber import OfflineTranscriber, Timings, timings_header
from asr.offline.upload import Upload, UploadProgress, read_upload
from transports.audio_io import AudioFileError

log = logging.getLogger("cadence.transcribe_server")

STREAM_FORMATS = ("json", "text")
T = TypeVar("T")


async def while_connected(request: web.Request, work: Awaitable[T]) -> T:
    """Await ``work``; cancel it (``ClientGone``) as soon as the client disconnects."""
    task = asyncio.ensure_future(work)
    try:
        while not (await asyncio.wait({task}, timeout=POLL_S))[0]:
            if client_gone(request):
                raise ClientGone("the client closed the connection")
    finally:
        if not task.done():  # the client left, or this handler was cancelled
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
    return task.result()


@dataclass(frozen=True)
class ServerOptions:
    max_upload_mb: float = 1024.0
    max_audio_s: float = 4 * 3600.0
    max_inflight: int = 64  # requests held at once (uploading, decoding or queued); more get 429
    max_audio_held_s: float = 8 * 3600.0  # decoded audio held by all requests together (230 MB per hour)
    aliases: tuple[str, ...] = ("whisper-1",)  # model names answered besides the engine's own
    tmp_dir: str | None = None
    api_key: str = ""  # non-empty: /v1/* needs "Authorization: Bearer <api_key>"
    # Files at least this long (by their header) go to the engine range by range as they decode.
    pipeline_min_s: float = 120.0


@dataclass(frozen=True)
class Params:
    response_format: str
    language: str | None
    words: bool
    stream: bool = False


def parse_params(upload: Upload, model_names: tuple[str, ...], languages: frozenset[str] | None) -> Params:
    if not upload.has_file:
        raise ApiError(400, "missing the 'file' part (multipart field 'file' with a filename)", param="file")
    if upload.size == 0:
        raise ApiError(400, f"the uploaded file {upload.filename!r} is empty (0 bytes)", param="file",
                       code="empty_file")
    model = (upload.get("model") or "").strip()
    if not model:
        raise ApiError(400, "missing the 'model' field", param="model")
    if model not in model_names:
        raise ApiError(400, f"model {model!r} is not served here; use one of: {', '.join(model_names)}",
                       param="model", code="model_not_found")
    fmt = (upload.get("response_format") or "json").strip()
    if fmt not in RESPONSE_FORMATS:
        raise ApiError(400, f"response_format must be one of {', '.join(RESPONSE_FORMATS)}, not {fmt!r}",
                       param="response_format")
    stream = (upload.get("stream") or "false").strip().lower()
    if stream not in ("true", "false", "1", "0"):
        raise ApiError(400, f"stream must be true or false, not {stream!r}", param="stream")
    streamed = stream in ("true", "1")
    if streamed and fmt not in STREAM_FORMATS:
        raise ApiError(400, f"stream=true sends transcript.text.delta events and works with response_format "
                            f"json or text, not {fmt!r}; drop stream for {fmt}", param="stream")
    language = (upload.get("language") or "").strip().lower() or None
    if language is not None and languages is not None and language not in languages:
        raise ApiError(400, f"this model transcribes {', '.join(sorted(languages))} only, not {language!r}",
                       param="language", code="unsupported_language")
    temperature = upload.get("temperature")
    if temperature is not None:
        try:
            float(temperature)
        except ValueError:
            raise ApiError(400, f"temperature must be a number, not {temperature!r}", param="temperature") from None
    granularities = upload.fields.get("timestamp_granularities[]", []) + upload.fields.get(
        "timestamp_granularities", [])
    words = "word" in granularities
    if words and fmt != "verbose_json":
        raise ApiError(400, "word timestamps need response_format=verbose_json", param="timestamp_granularities")
    return Params(fmt, language, words, streamed)


class TranscriptionServer:
    """The HTTP side: one per process (the only one, or each host worker: ``host_pool``).

    ``inflight`` and ``budget`` default to this process's own; host workers pass the server-wide
    ones (``SharedInflight``, ``RemoteBudget``).
    """

    def __init__(self, transcriber: OfflineTranscriber, options: ServerOptions | None = None,
                 inflight: Any = None, budget: Any = None) -> None:
        self.transcriber = transcriber
        self.options = options or ServerOptions()
        engine = transcriber.engine
        self.model_names = (engine.name, *(a for a in self.options.aliases if a != engine.name))
        self.inflight = inflight if inflight is not None else LocalInflight()
        self.budget = budget if budget is not None else AudioBudget(self.options.max_audio_held_s)

    def app(self) -> web.Application:
        app = web.Application(middlewares=[_errors, _auth(self.options.api_key)])
        app.router.add_post("/v1/audio/transcriptions", self.transcriptions)
        app.router.add_get("/v1/models", self.models)
        app.router.add_get("/health", self.health)

        async def close(_: web.Application) -> None:
            await asyncio.to_thread(self.transcriber.close)

        app.on_cleanup.append(close)
        return app

    async def models(self, _: web.Request) -> web.Response:
        data = [{"id": n, "object": "model", "owned_by": "cadence"} for n in self.model_names]
        return web.json_response({"object": "list", "data": data})

    async def health(self, _: web.Request) -> web.Response:
        engine = await self.transcriber.batcher.health()
        return web.json_response({"status": "ok", "model": self.model_names[0], "inflight": self.inflight.total,
                                  "pid": os.getpid(), **engine})

    async def transcriptions(self, request: web.Request) -> web.Response:
        if not self.inflight.try_enter(self.options.max_inflight):
            raise ApiError(429, f"the server is at its limit of {self.options.max_inflight} requests; retry later",
                           code="busy", headers={"Retry-After": "5"})
        upload: Upload | None = None
        early: _Early | None = None
        try:
            # Only an upload that can hold pipeline_min_s of 16 kbyte/s PCM (8 kHz 16-bit) is watched.
            long_enough = (request.content_length or 0) >= self.options.pipeline_min_s * 16000
            progress = UploadProgress() if long_enough and hasattr(self.transcriber.batcher, "stream_parts") else None
            max_bytes = int(self.options.max_upload_mb * 1e6)
            if progress is None:
                upload = await read_upload(request, max_bytes, self.options.tmp_dir)
            else:
                early, upload = await self._read_watching(request, max_bytes, progress)
            params = parse_params(upload, self.model_names, self.transcriber.engine.languages)
            if early is not None:
                answer = await self._finish_early(request, early, upload, params)
                if answer is not None:
                    return answer
            return await self._transcribe(request, upload, params)
        except ClientGone:
            log.info("a client went away before its transcript was ready; its windows were withdrawn")
            return web.Response(status=499)  # nobody reads it
        finally:
            if early is not None and not early.task.done():
                early.task.cancel()
                await asyncio.gather(early.task, return_exceptions=True)
            self.inflight.leave()
            if upload is not None:
                upload.cleanup()

    async def _read_watching(self, request: web.Request, max_bytes: int,
                             progress: UploadProgress) -> tuple[_Early | None, Upload]:
        """The upload, and the early start of its transcript once its head is on disk (if it qualifies)."""
        reading = asyncio.ensure_future(read_upload(request, max_bytes, self.options.tmp_dir, progress))
        early = None
        try:
            await asyncio.wait({reading, progress.started}, return_when=asyncio.FIRST_COMPLETED)
            if not reading.done():
                early = self._start_early(progress)
            return early, await reading
        except BaseException:
            if early is not None:
                early.task.cancel()
                await asyncio.gather(early.task, return_exceptions=True)
            raise
        finally:
            if not reading.done():
                reading.cancel()
                await asyncio.gather(reading, return_exceptions=True)

    def _start_early(self, progress: UploadProgress) -> _Early | None:
        """A long PCM WAV upload whose fields came first: start on its windows while the rest arrives.

        Only where the answer cannot differ: the fields so far name this model, no stream, a language
        served; ``_finish_early`` checks them again with the finished upload."""
        assert progress.path is not None
        try:
            with open(progress.path, "rb") as f:
                parsed = wav_head(f.read(progress.HEAD_BYTES))
        except OSError:
            return None
        if parsed is None:
            return None
        info, layout = parsed
        if not (max(self.options.pipeline_min_s, 0.0) <= info.duration <= self.options.max_audio_s
                and info.rate >= MIN_SAMPLE_RATE):
            return None
        fields = progress.fields

        def field(name: str, default: str) -> str:
            return (fields.get(name) or [default])[-1].strip()

        languages = self.transcriber.engine.languages
        language = field("language", "").lower() or None
        if (field("model", "") not in self.model_names or field("stream", "false").lower() in ("true", "1")
                or (language is not None and languages is not None and language not in languages)):
            return None
        timings = Timings()
        log.debug("%.0f s of WAV: transcribing while it uploads", info.duration)
        task = asyncio.ensure_future(self._early(progress, info, layout, language, timings))
        return _Early(task, info, language, timings)

    async def _early(self, progress: UploadProgress, info: AudioInfo, layout: PcmLayout, language: str | None,
                     timings: Timings) -> Any:
        async with self.budget.reserve(min(info.duration, self.options.max_audio_s)):
            assert progress.path is not None
            decode = open_arriving(progress.path, info, layout, progress, self.transcriber.engine.sample_rate)
            return await self.transcriber.transcribe_decode(decode, language, timings)

    async def _finish_early(self, request: web.Request, early: _Early, upload: Upload,
                            params: Params) -> web.StreamResponse | None:
        """The early transcript, if the finished upload is what its start said; None: do it the usual way."""
        info = await asyncio.to_thread(probe, upload.path)
        try:
            if params.stream or params.language != early.language or info is None or (
                    info.rate, info.channels, info.frames, info.subtype) != (
                    early.info.rate, early.info.channels, early.info.frames, early.info.subtype):
                raise AudioFileError("not what its header said")
            check_header(info, upload.size, self.options.max_audio_s)
            transcript = await while_connected(request, early.task)
        except AudioFileError:  # the usual path answers (and says what is wrong, as it always has)
            early.task.cancel()  # its windows and its share of the audio budget go first
            await asyncio.gather(early.task, return_exceptions=True)
            return None
        return _answer(transcript, params, early.timings)

    async def _transcribe(self, request: web.Request, upload: Upload, params: Params) -> web.StreamResponse:
        info = (upload.memory_info[0] if upload.memory_info is not None
                else await asyncio.to_thread(probe, upload.path))
        # Unknown until decoded (containers libsndfile cannot read): guess from the size at 16 kbit/s.
        seconds = upload.size / 2000
        if info is not None:
            try:
                seconds = min(info.duration, plausible_seconds(info, upload.size))
            except AudioFileError as exc:
                raise ApiError(400, f"could not decode {upload.filename!r} as audio: {exc}", param="file",
                               code="invalid_audio") from None
        async with self.budget.reserve(min(seconds, self.options.max_audio_s)):
            if (not params.stream and info is not None and info.duration >= self.options.pipeline_min_s
                    and hasattr(self.transcriber.batcher, "stream_parts")):
                return await self._pipelined(request, upload, params)
            return await self._decode_and_transcribe(request, upload, params)

    async def _decode_and_transcribe(self, request: web.Request, upload: Upload,
                                     params: Params) -> web.StreamResponse:
        timings = Timings()
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        try:
            if upload.data is not None and upload.memory_info is not None:  # a small upload, in memory (memory_audio.py)
                rate, (info, layout) = self.transcriber.engine.sample_rate, upload.memory_info
                # a WAV's copy and scale (~30 s at the engine's rate: ~0.5 ms) here; libsndfile or a resample in a thread
                inline = layout is not None and info.rate == rate and info.frames * info.channels <= INLINE_SAMPLES
                decode = partial(decode_memory_audio, upload.data, info, layout, rate,
                                 max_seconds=self.options.max_audio_s)
                audio = decode() if inline else await asyncio.to_thread(decode)
            else:
                audio = await asyncio.to_thread(decode_file, upload.path, self.transcriber.engine.sample_rate,
                                                max_seconds=self.options.max_audio_s)
        except AudioFileError as exc:
            raise _decode_error(exc, upload) from None
        timings.decode_s = loop.time() - t0
        upload.cleanup()  # the disk copy is no longer needed
        if params.stream:
            return await stream_transcript(request, self.transcriber, audio, params.language, timings)
        transcript = await while_connected(request, self.transcriber.transcribe_audio(audio, params.language, timings))
        return _answer(transcript, params, timings)

    async def _pipelined(self, request: web.Request, upload: Upload, params: Params) -> web.StreamResponse:
        """A long file: its windows go to the engine range by range as it decodes (the same transcript)."""
        timings = Timings()
        try:
            decode = await asyncio.to_thread(open_decode, upload.path, self.transcriber.engine.sample_rate,
                                             max_seconds=self.options.max_audio_s)
            transcript = await while_connected(
                request, self.transcriber.transcribe_decode(decode, params.language, timings))
        except AudioFileError as exc:
            raise _decode_error(exc, upload) from None
        return _answer(transcript, params, timings)


@dataclass
class _Early:
    task: asyncio.Task[Any]
    info: AudioInfo
    language: str | None
    timings: Timings


def _decode_error(exc: AudioFileError, upload: Upload) -> ApiError:
    if isinstance(exc, AudioTooLongError):
        return ApiError(400, f"{upload.filename!r}: {exc}", param="file", code="audio_too_long")
    reason = str(exc) if upload.path is None else str(exc).replace(str(upload.path), upload.filename)  # no temp path
    return ApiError(400, f"could not decode {upload.filename!r} as audio: {reason}", param="file",
                    code="invalid_audio")


def _answer(transcript: Any, params: Params, timings: Timings) -> web.Response:
    body, content_type = render(transcript, params.response_format, params.words)
    header = timings_header(timings, transcript.duration)
    return web.Response(text=body, content_type=content_type, headers={"x-cadence-timings": header})


def _auth(api_key: str):  # type: ignore[no-untyped-def]
    @web.middleware
    async def auth(request: web.Request, handler):  # type: ignore[no-untyped-def]
        if api_key and request.path.startswith("/v1/"):
            scheme, _, offered = request.headers.get("Authorization", "").partition(" ")
            ok = scheme.lower() == "bearer" and hmac.compare_digest(
                offered.strip().encode("utf-8", "surrogatepass"), api_key.encode("utf-8", "surrogatepass"))
            if not ok:
                raise ApiError(401, "missing or wrong API key: send Authorization: Bearer <key>",
                               code="invalid_api_key")
        return await handler(request)

    return auth


@web.middleware
async def _errors(request: web.Request, handler):  # type: ignore[no-untyped-def]
    try:
        return await handler(request)
    except ApiError as exc:
        return exc.response()
    except web.HTTPException:
        raise
    except ConnectionError:  # the client went away (mid-upload, or while waiting)
        log.info("a client went away mid-request")
        return web.Response(status=499)
    except Exception:
        log.exception("transcription failed")
        return ApiError(500, "internal error while transcribing; see the server log").response()


def stop_on_signals(stop: asyncio.Event) -> None:
    """SIGTERM and SIGINT set ``stop`` (where the running loop supports signal handlers)."""
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            loop.add_signal_handler(sig, stop.set)


async def serve(transcriber: OfflineTranscriber, host: str, port: int, options: ServerOptions | None = None,
                on_ready=None, stop: asyncio.Event | None = None) -> None:  # type: ignore[no-untyped-def]
    """Serve until cancelled or ``stop`` is set (SIGTERM/SIGINT set it when none is given);
    ``on_ready(url)`` is called once listening."""
    if stop is None:
        stop = asyncio.Event()
        stop_on_signals(stop)
    server = TranscriptionServer(transcriber, options)
    runner = web.AppRunner(server.app(), access_log=None)
    await runner.setup()
    try:
        site = web.TCPSite(runner, host, port)
        await site.start()
        bound = runner.addresses[0]
        url = f"http://{host}:{bound[1]}"
        if on_ready is not None:
            on_ready(url)
        await stop.wait()
    finally:
        await runner.cleanup()
