"""``--workers N``: the same answers as the one-process server, limits that hold across workers.

The engine process is this test process (``serve_workers`` in the test's loop); the host workers
are real child processes. Each engine (the tiny random Parakeet, the embedded Whisper) serves the
same files through both designs, and every body must be byte for byte the same.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections import Counter
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from aiohttp import ClientSession, FormData

from asr.offline.host_pool import serve_workers
from asr.offline.server import ServerOptions, serve
from asr.offline.shm_audio import SHM_DIR, segment_prefix
from asr.offline.transcriber import OfflineTranscriber

pytest.importorskip("torch")


@asynccontextmanager
async def running(start: Callable[..., Any], engine: Any, **kw: Any) -> AsyncIterator[str]:
    """A server (``serve`` or ``serve_workers``) on its own transcriber, until the block ends."""
    stop, ready = asyncio.Event(), asyncio.get_running_loop().create_future()
    task = asyncio.ensure_future(start(OfflineTranscriber(engine), "127.0.0.1", 0, on_ready=ready.set_result,
                                       stop=stop, **kw))
    done, _ = await asyncio.wait({task, ready}, return_when=asyncio.FIRST_COMPLETED)
    if task in done:
        task.result()  # raises what stopped it
    try:
        yield ready.result()
    finally:
        stop.set()
        await task


async def post(session: ClientSession, url: str, path: Path, **fields: str) -> tuple[int, str]:
    form = FormData()
    form.add_field("file", path.read_bytes(), filename=path.name)
    for k, v in {"model": "whisper-1", **fields}.items():
        form.add_field(k, v)
    async with session.post(url + "/v1/audio/transcriptions", data=form) as r:
        return r.status, await r.text()


REQUESTS = [
    {"response_format": "verbose_json", "timestamp_granularities[]": "word"},
    {"response_format": "srt"},
    {"response_format": "json", "stream": "true"},
    {"response_format": "text"},
]


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    from testkit.offline_audio import prompt_clips, speech_track, write_audio

    d = tmp_path_factory.mktemp("audio")
    first, _ = speech_track(40, seed=3)  # longer than a 30 s window: cut with overlap
    second, _ = speech_track(12, seed=4)
    long = np.concatenate([first, np.zeros(10 * 16000, np.float32), second])
    short = prompt_clips()[5][0]
    return [write_audio(d / "long.flac", long, 16000), write_audio(d / "short.wav", short, 16000)]


def same_answers(engine: Any, files: list[Path], workers: int) -> None:
    async def run() -> None:
        answers: dict[str, list[tuple[int, str]]] = {}
        async with ClientSession() as session:
            for name, start, kw in (("one", serve, {}), ("workers", serve_workers, {"workers": workers})):
                async with running(start, engine, **kw) as url:
                    answers[name] = [await post(session, url, f, **req) for f in files for req in REQUESTS]

        assert all(status == 200 for status, _ in answers["one"]), answers["one"]
        assert answers["workers"] == answers["one"]
        assert '"words"' in answers["one"][0][1]
        assert not list(SHM_DIR.glob(segment_prefix(os.getpid()) + "*"))  # every segment was taken and unlinked

    asyncio.run(run())


def test_tiny_parakeet_answers_the_same_through_workers(tmp_path: Path, files: list[Path]) -> None:
    pytest.importorskip("transformers")
    from asr.offline.engine_factory import make_engine
    from asr.offline.window_engine import EngineSpec
    from asr.parakeet.tiny import make_tiny_checkpoint

    engine = make_engine(EngineSpec(engine="parakeet", model=str(make_tiny_checkpoint(tmp_path / "tiny")),
                                    device="cpu", name="whisper-1"))
    same_answers(engine, files, workers=2)


def test_embedded_whisper_answers_the_same_through_workers(files: list[Path]) -> None:
    from agent.models import resolve_engine_spec
    from asr.offline.engine_factory import make_engine
    from asr.offline.window_engine import EngineSpec

    same_answers(make_engine(resolve_engine_spec(EngineSpec())), files[1:], workers=2)  # one window: seconds


class SlowEngine:
    """An engine that takes ``delay_s`` per call and says each window's length."""

    name, sample_rate, max_batch, languages = "slow", 16000, 4, None

    def __init__(self, delay_s: float) -> None:
        from asr.offline.plan import PlanOptions

        self.plan = PlanOptions()
        self.delay_s = delay_s

    def transcribe_windows(self, windows: list[np.ndarray], language: str | None) -> list[list[Any]]:
        import time

        from asr.offline.results import Word

        time.sleep(self.delay_s)
        return [[Word(0.0, 0.5, f" n{len(w)}")] for w in windows]


def test_limits_and_auth_hold_across_workers(files: list[Path]) -> None:
    """max_inflight=2 over three workers: of six requests at once, two are served and four get 429;
    a wrong key is a 401 from every worker."""
    options = ServerOptions(max_inflight=2, api_key="sesame")

    async def run() -> None:
        async with running(serve_workers, SlowEngine(1.0), workers=3, options=options) as url:
            headers = {"Authorization": "Bearer sesame"}
            async with ClientSession(headers=headers) as session:
                results = await asyncio.gather(*(post(session, url, files[1]) for _ in range(6)))
                async with session.get(url + "/health") as r:
                    health = await r.json()
            statuses = sorted(s for s, _ in results)
            assert statuses == [200, 200, 429, 429, 429, 429], results
            assert all('"code": "busy"' in body for s, body in results if s == 429)
            assert health["inflight"] == 0 and health["windows"] == 2
            async with ClientSession(headers={"Authorization": "Bearer wrong"}) as session:
                for _ in range(6):  # enough connections to reach every worker
                    status, body = await post(session, url, files[1])
                    assert status == 401 and "invalid_api_key" in body

    asyncio.run(run())


def test_the_shared_counter_sums_every_workers_slot() -> None:
    from asr.offline.inflight import SharedInflight, shared_inflight_fd

    fd = shared_inflight_fd(2)
    try:
        a, b = SharedInflight(fd, 0), SharedInflight(fd, 1)
        assert a.try_enter(2) and a.try_enter(2)
        assert not b.try_enter(2) and b.total == 2 and b.count == 0
        a.leave()
        assert b.try_enter(2) and a.total == 2 and (a.count, b.count) == (1, 1)
        assert SharedInflight(fd, 0).total == 1  # a restarted worker starts its own slot at zero
    finally:
        os.close(fd)


def test_the_audio_budget_is_one_for_all_workers(files: list[Path]) -> None:
    """Room for one short file at a time: three at once over three workers run one after another."""
    import soundfile as sf

    seconds = sf.info(str(files[1])).duration
    options = ServerOptions(max_audio_held_s=1.5 * seconds)

    async def run() -> None:
        async with running(serve_workers, SlowEngine(0.3), workers=3, options=options) as url, ClientSession() as session:
            results = await asyncio.gather(*(post(session, url, files[1]) for _ in range(3)))
            async with session.get(url + "/health") as r:
                health = await r.json()
        assert [s for s, _ in results] == [200, 200, 200], results
        assert health["windows"] == 3 and health["batches"] == 3, health  # never two files held at once

    asyncio.run(run())


def test_connections_spread_over_the_workers() -> None:
    """Thirty fresh connections at once reach every one of three workers with SO_REUSEPORT
    (``balance="kernel"``), not the first to wake (on one shared socket, one worker took a whole burst)."""
    async def run() -> set[int]:
        async with running(serve_workers, SlowEngine(0.0), workers=3, balance="kernel") as url:
            async def pid() -> int:
                async with ClientSession() as session, session.get(url + "/health") as r:
                    return (await r.json())["pid"]
            return set(await asyncio.gather(*(pid() for _ in range(30))))

    assert len(asyncio.run(run())) == 3  # each worker misses all 30 with probability (2/3)^30 < 1e-5


def test_kept_alive_connections_are_dealt_evenly_over_the_workers() -> None:
    """The default (``balance="least_loaded"``): nine keep-alive clients opened at once land three on each of three
    workers (the kernel's hash splits nine over three unevenly 91% of the time), and nine more after the first
    nine left do too."""
    async def run() -> list[list[int]]:
        async with running(serve_workers, SlowEngine(0.0), workers=3) as url:
            rounds = []
            for _ in range(2):
                sessions = [ClientSession() for _ in range(9)]
                try:
                    async def pid(session: ClientSession) -> int:
                        async with session.get(url + "/health") as r:
                            return (await r.json())["pid"]
                    pids = await asyncio.gather(*(pid(s) for s in sessions))
                    again = await asyncio.gather(*(pid(s) for s in sessions))  # the same kept-alive connections
                    assert again == pids
                    rounds.append(sorted(Counter(pids).values()))
                finally:
                    await asyncio.gather(*(s.close() for s in sessions))
                await asyncio.sleep(0.3)  # the workers report the closed connections
            return rounds

    assert asyncio.run(run()) == [[3, 3, 3], [3, 3, 3]]


def test_long_files_reach_the_engine_as_they_decode(tmp_path: Path, files: list[Path]) -> None:
    """``pipeline_min_s``: a file's windows go to the engine range by range while it decodes, in one
    process and through a worker, with the answers of the whole-file path byte for byte."""
    pytest.importorskip("transformers")
    from asr.offline.decode import decode_file, open_decode
    from asr.offline.engine_factory import make_engine
    from asr.offline.window_batcher import WindowBatcher
    from asr.offline.window_engine import EngineSpec
    from asr.parakeet.tiny import make_tiny_checkpoint

    engine = make_engine(EngineSpec(engine="parakeet", model=str(make_tiny_checkpoint(tmp_path / "tiny")),
                                    device="cpu", name="whisper-1"))
    whole, piped = ServerOptions(pipeline_min_s=1e9), ServerOptions(pipeline_min_s=0.0)
    requests = [r for r in REQUESTS if "stream" not in r]

    async def answers() -> dict[str, list[tuple[int, str]]]:
        out = {}
        async with ClientSession() as session:
            for name, start, kw in (("whole", serve, {"options": whole}), ("piped", serve, {"options": piped}),
                                    ("worker", serve_workers, {"workers": 1, "options": piped})):
                async with running(start, engine, **kw) as url:
                    out[name] = [await post(session, url, files[0], **req) for req in requests]
        return out

    got = asyncio.run(answers())
    assert all(status == 200 for status, _ in got["whole"]) and '"words"' in got["whole"][0][1]
    assert got["piped"] == got["whole"] and got["worker"] == got["whole"]

    parts: list[int] = []

    class Counting(WindowBatcher):
        def stream_parts(self, windows, language):  # type: ignore[no-untyped-def]
            async def counted():  # type: ignore[no-untyped-def]
                async for part in windows:
                    parts.append(len(part))
                    yield part
            return super().stream_parts(counted(), language)

    async def direct() -> tuple[Any, Any]:
        transcriber = OfflineTranscriber(engine, batcher=Counting(engine))
        try:
            ranged = await transcriber.transcribe_decode(open_decode(files[0], chunk_s=5.0), None)
            return ranged, await transcriber.transcribe_audio(decode_file(files[0]), None)
        finally:
            transcriber.close()

    ranged, alone = asyncio.run(direct())
    assert ranged == alone and ranged.text
    assert len([n for n in parts if n]) >= 2, parts  # windows went out before the decode was done


def test_a_slow_wav_upload_is_transcribed_while_it_arrives(tmp_path: Path, files: list[Path]) -> None:
    """A 5 min PCM WAV sent in slow pieces: its first windows reach the engine before the upload ends,
    and the answers are byte for byte those of the file sent whole to a server that waits for it all."""
    import time

    pytest.importorskip("transformers")
    from asr.offline.decode import decode_file
    from asr.offline.engine_factory import make_engine
    from asr.offline.window_engine import EngineSpec
    from asr.parakeet.tiny import make_tiny_checkpoint
    from testkit.offline_audio import write_audio

    tiny = make_engine(EngineSpec(engine="parakeet", model=str(make_tiny_checkpoint(tmp_path / "tiny")),
                                  device="cpu", name="whisper-1"))
    first_batch: list[float] = []

    class Timed:
        name, sample_rate, plan, max_batch, languages = tiny.name, tiny.sample_rate, tiny.plan, tiny.max_batch, None

        def transcribe_windows(self, windows: list[np.ndarray], language: str | None) -> list[Any]:
            first_batch.append(time.monotonic())
            # One window at a time: the random tiny model has near-ties everywhere, and on some CPUs a
            # different batch (the early start batches the windows as they arrive) flips one (seen on an EPYC
            # box). Window by window the answers depend on the windows alone: what the server cut, ordered
            # and stitched, which is what this test compares.
            return [r for w in windows for r in tiny.transcribe_windows([w], language)]

    audio = np.resize(decode_file(files[0]), 300 * 16000)
    wav = write_audio(tmp_path / "five.wav", audio, 16000)
    body = multipart(wav.read_bytes(), {"model": "whisper-1", "response_format": "verbose_json"})
    sent: list[float] = []

    async def slowly():  # type: ignore[no-untyped-def]
        async for piece in slow(body):
            yield piece
        sent.append(time.monotonic())

    async def run() -> tuple[str, str, str]:
        headers = {"Content-Type": f"multipart/form-data; boundary={BOUNDARY}", "Content-Length": str(len(body))}
        out = []
        async with ClientSession() as session:
            for start, kw, fast in ((serve, {"options": ServerOptions(pipeline_min_s=1e9)}, True),
                                    (serve, {}, False), (serve_workers, {"workers": 1}, False)):
                async with running(start, Timed(), **kw) as url:
                    data = body if fast else slowly()
                    async with session.post(url + "/v1/audio/transcriptions", data=data, headers=headers) as r:
                        assert r.status == 200, await r.text()
                        out.append(await r.text())
                if start is serve and not fast:
                    assert first_batch and sent and first_batch[0] < sent[0] - 0.2, (first_batch[:1], sent)
                first_batch.clear()
        return out[0], out[1], out[2]

    whole, early, worker = asyncio.run(run())
    assert '"segments"' in whole and len(whole) > 1000 and early == whole and worker == whole


BOUNDARY = "slow-upload-boundary"


def multipart(audio: bytes, before: dict[str, str], after: dict[str, str] | None = None) -> bytes:
    """A multipart body: ``before`` fields, the file (``five.wav``), ``after`` fields."""
    def field(k: str, v: str) -> bytes:
        return f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="{k}"\r\n\r\n{v}\r\n'.encode()

    head = b"".join(field(k, v) for k, v in before.items())
    head += f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="file"; filename="five.wav"\r\n\r\n'.encode()
    tail = b"\r\n" + b"".join(field(k, v) for k, v in (after or {}).items()) + f"--{BOUNDARY}--\r\n".encode()
    return head + audio + tail


async def slow(body: bytes):  # type: ignore[no-untyped-def]
    for k in range(0, len(body), 256 * 1024):
        yield body[k:k + 256 * 1024]
        await asyncio.sleep(0.03)


def test_an_early_start_that_the_finished_upload_contradicts_is_dropped(tmp_path: Path, files: list[Path],
                                                                         caplog: pytest.LogCaptureFixture) -> None:
    """A language field after the file, a WAV shorter than its header says: the early transcript is
    dropped and the usual path answers, as a server that waits for the whole upload does."""
    pytest.importorskip("transformers")
    from asr.offline.decode import decode_file
    from asr.offline.engine_factory import make_engine
    from asr.offline.window_engine import EngineSpec
    from asr.parakeet.tiny import make_tiny_checkpoint
    from testkit.offline_audio import write_audio

    engine = make_engine(EngineSpec(engine="parakeet", model=str(make_tiny_checkpoint(tmp_path / "tiny")),
                                    device="cpu", name="whisper-1"))
    wav = write_audio(tmp_path / "five.wav", np.resize(decode_file(files[0]), 200 * 16000), 16000).read_bytes()
    bodies = [multipart(wav, {"model": "whisper-1"}, {"language": "en"}),  # the language comes too late
              multipart(wav[: len(wav) * 2 // 3], {"model": "whisper-1"})]  # the header promises more

    async def run() -> dict[str, list[tuple[int, str]]]:
        out: dict[str, list[tuple[int, str]]] = {"whole": [], "early": []}
        async with ClientSession() as session:
            for name, options in (("whole", ServerOptions(pipeline_min_s=1e9)), ("early", ServerOptions())):
                async with running(serve, engine, options=options) as url:
                    for body in bodies:
                        headers = {"Content-Type": f"multipart/form-data; boundary={BOUNDARY}",
                                   "Content-Length": str(len(body))}
                        data = body if name == "whole" else slow(body)
                        async with session.post(url + "/v1/audio/transcriptions", data=data, headers=headers) as r:
                            out[name].append((r.status, await r.text()))
                    health = await (await session.get(url + "/health")).json()
                    assert health["queued_windows"] == 0 and health["inflight"] == 0
        return out

    caplog.set_level(logging.DEBUG, logger="cadence.transcribe_server")
    got = asyncio.run(run())
    assert got["early"] == got["whole"] and got["whole"][0][0] == 200, got["whole"]
    assert sum("while it uploads" in r.getMessage() for r in caplog.records) == 2  # both started early


@pytest.mark.parametrize("workers", [0, 1])
def test_a_client_leaving_a_long_file_withdraws_its_windows(tmp_path: Path, files: list[Path], workers: int) -> None:
    """A 10 min file on an engine that takes 1 s per batch of 4: the client leaves once the first batch has run;
    its queued windows are withdrawn (most never run), nothing stays held, no segment is left behind."""
    from asr.offline.decode import decode_file
    from asr.offline.plan import PlanOptions, plan_windows
    from testkit.offline_audio import write_audio

    audio = np.resize(decode_file(files[0]), 600 * 16000)
    planned = len(plan_windows(audio, 16000, PlanOptions()))
    wav = write_audio(tmp_path / "five.wav", audio, 16000)
    body = multipart(wav.read_bytes(), {"model": "slow"})
    headers = {"Content-Type": f"multipart/form-data; boundary={BOUNDARY}"}

    async def run() -> dict[str, Any]:
        start, kw = (serve, {}) if workers == 0 else (serve_workers, {"workers": workers})
        async with running(start, SlowEngine(1.0), **kw) as url, ClientSession() as session:
            post = asyncio.ensure_future(session.post(url + "/v1/audio/transcriptions", data=body, headers=headers))
            # leave once the engine has run the file's first batch (a fixed 0.7 s ran no window at all on CI's
            # loaded 2-core box: the upload and its first range took longer); the batch after it is under way
            for _ in range(300):
                health = await (await session.get(url + "/health")).json()
                if health["windows"]:
                    break
                await asyncio.sleep(0.05)
            post.cancel()
            await asyncio.gather(post, return_exceptions=True)
            for _ in range(50):
                health = await (await session.get(url + "/health")).json()
                if not health["inflight"] and not health["queued_windows"]:
                    break
                await asyncio.sleep(0.1)
            return health

    health = asyncio.run(run())
    assert health["inflight"] == 0 and health["queued_windows"] == 0, health
    assert 0 < health["windows"] <= planned // 2, (health, planned)
    assert not list(SHM_DIR.glob(segment_prefix(os.getpid()) + "*"))
