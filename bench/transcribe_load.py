"""The load side of ``bench/transcribe_server.py``: clip sets, prebuilt uploads, client processes.

A clip set is ``10`` (every clip 10 s), ``3600`` (1 h files) or ``mix``: a leaderboard-like length
mix, durations spread over a log-normal (median 5.9 s, sigma 0.65) clipped to 1-35 s, mean ~7.3 s,
like LibriSpeech test-clean (2,620 utterances, 1.3-35 s, mean 7.4 s). Each client process builds
the same clips from their seeds (speech from Debian's Asterisk prompts where installed, speech-like
harmonics otherwise) and keeps ``C / K`` requests in flight with aiohttp on uvloop, each a WAV
upload in one multipart body built once; the K clients start together (a barrier).
"""

from __future__ import annotations

import asyncio
import io
import json
import math
import multiprocessing
import statistics
import time
import wave
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

MIX_MEDIAN_S, MIX_SIGMA, MIX_MIN_S, MIX_MAX_S = 5.9, 0.65, 1.0, 35.0
MIX_DISTINCT = 64
BOUNDARY = "cadence-bench-boundary"


def mix_durations(n: int) -> list[float]:
    """``n`` durations like LibriSpeech test-clean's: the log-normal's quantiles at ``(k + 0.5) / n``
    (evenly spread over the distribution, the tails included), clipped to 1-35 s, in a fixed shuffle."""
    normal = statistics.NormalDist(math.log(MIX_MEDIAN_S), MIX_SIGMA)
    out = [min(MIX_MAX_S, max(MIX_MIN_S, math.exp(normal.inv_cdf((k + 0.5) / n)))) for k in range(n)]
    order = np.random.default_rng(0).permutation(n)
    return [round(out[i], 2) for i in order]


def clip_set(spec: str, max_concurrency: int) -> list[tuple[float, int]]:
    """The ``(seconds, seed)`` of the distinct clips of a plan group (requests cycle through them)."""
    if spec == "mix":
        return [(s, k) for k, s in enumerate(mix_durations(MIX_DISTINCT))]
    seconds = float(spec)
    distinct = min(8, max_concurrency) if seconds < 600 else min(2, max_concurrency)  # long clips: few
    return [(seconds, k) for k in range(distinct)]


def speech(seconds: float, seed: int) -> np.ndarray:
    """Mono float32 speech at 16 kHz."""
    try:
        from testkit.corpus import SOUNDS  # needs pytest
    except ImportError:
        SOUNDS = Path("/nonexistent")
    if SOUNDS.is_dir():
        from testkit.offline_audio import speech_track

        return speech_track(seconds, seed=seed)[0]
    # No Asterisk prompts here (the GPU machine): speech-like harmonics with pauses in room tone.
    n = int(seconds * 16000)
    if seconds > 300:  # long clips repeat 5 minutes (the model's cost does not depend on the words)
        return np.resize(speech(300, seed), n)
    rng = np.random.default_rng(seed)
    t = np.arange(n) / 16000
    f0 = 100 + 80 * rng.random()
    voiced = (np.sin(2 * np.pi * 0.4 * t + rng.random() * 6) > -0.3).astype(np.float32)
    sig = sum(np.sin(2 * np.pi * f0 * k * t) / k for k in range(1, 6)) * (0.5 + 0.5 * np.sin(2 * np.pi * 4 * t))
    return (0.1 * voiced * sig + 0.001 * rng.standard_normal(n)).astype(np.float32)


def wav_bytes(audio: np.ndarray) -> bytes:
    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(16000)
        w.writeframes((np.clip(audio, -1, 1) * 32767).astype("<i2").tobytes())
    return buf.getvalue()


def multipart(model: str, wav: bytes) -> bytes:
    head = (f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="model"\r\n\r\n{model}\r\n'
            f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="file"; filename="clip.wav"\r\n'
            f"Content-Type: audio/wav\r\n\r\n").encode()
    return head + wav + f"\r\n--{BOUNDARY}--\r\n".encode()


# --- one client process ----------------------------------------------------------------------------

_BODIES: dict[str, list[tuple[float, bytes]]] = {}
_BARRIER: Any = None


def _init(model: str, groups: dict[str, list[tuple[float, int]]], barrier: Any) -> None:
    global _BARRIER
    _BARRIER = barrier
    for key, clips in groups.items():
        _BODIES[key] = [(s, multipart(model, wav_bytes(speech(s, seed)))) for s, seed in clips]


async def _requests(url: str, key: str, concurrency: int, requests: int, offset: int) -> dict[str, Any]:
    import aiohttp

    bodies = _BODIES[key]
    latencies: list[float] = []
    server: list[dict[str, Any]] = []
    audio_s = 0.0
    todo = iter(range(offset, offset + requests))
    headers = {"Content-Type": f"multipart/form-data; boundary={BOUNDARY}"}
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=7200)) as session:

        async def worker() -> None:
            nonlocal audio_s
            for i in todo:
                seconds, body = bodies[i % len(bodies)]
                t0 = time.perf_counter()
                async with session.post(f"{url}/v1/audio/transcriptions", data=body, headers=headers) as resp:
                    text = await resp.text()
                    if resp.status != 200:
                        raise RuntimeError(f"HTTP {resp.status}: {text[:300]}")
                    server.append(json.loads(resp.headers["x-cadence-timings"]))
                latencies.append(time.perf_counter() - t0)
                audio_s += seconds

        cpu0, t0 = time.process_time(), time.time()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        t1, cpu1 = time.time(), time.process_time()
    return {"latencies": latencies, "server": server, "audio_s": audio_s, "start": t0, "end": t1,
            "client_cpu_s": cpu1 - cpu0}


def _run(url: str, key: str, concurrency: int, requests: int, offset: int) -> dict[str, Any]:
    _BARRIER.wait(timeout=600)  # every client process starts together (and each takes one share)
    try:
        import uvloop

        return uvloop.run(_requests(url, key, concurrency, requests, offset))
    except ImportError:
        return asyncio.run(_requests(url, key, concurrency, requests, offset))


class Clients:
    """``k`` client processes holding every plan group's uploads."""

    def __init__(self, k: int, model: str, groups: dict[str, list[tuple[float, int]]]) -> None:
        ctx = multiprocessing.get_context("spawn")
        self.k = k
        self.barrier = ctx.Barrier(k)
        self.pool = ProcessPoolExecutor(k, mp_context=ctx, initializer=_init, initargs=(model, groups, self.barrier))

    def run(self, url: str, key: str, concurrency: int, requests: int) -> dict[str, Any]:
        """One closed-loop level: ``concurrency`` requests in flight, ``requests`` in all, over the clients."""
        k = max(1, min(self.k, concurrency))
        if k != self.k:  # fewer requests in flight than clients: the others pass the barrier idle
            shares = [(concurrency, requests)] + [(0, 0)] * (self.k - 1)
        else:
            shares = [(concurrency // k + (j < concurrency % k), requests // k + (j < requests % k)) for j in range(k)]
        offsets = np.cumsum([0] + [r for _, r in shares]).tolist()
        jobs = [self.pool.submit(_run, url, key, c, r, o) for (c, r), o in zip(shares, offsets[:-1], strict=True)]
        parts = [j.result() for j in jobs]
        active = [p for p in parts if p["latencies"]]
        return {"latencies": sorted(x for p in parts for x in p["latencies"]),
                "server": [s for p in parts for s in p["server"]], "audio_s": sum(p["audio_s"] for p in parts),
                "wall_s": max(p["end"] for p in active) - min(p["start"] for p in active),
                "client_cpu_s": sum(p["client_cpu_s"] for p in parts)}

    def close(self) -> None:
        self.pool.shutdown(cancel_futures=True)


