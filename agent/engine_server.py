"""The engine process: the GPU engines (Kokoro's batcher, Parakeet's StreamBatcher) serving every session
process over one Unix socket.

    python -m agent.engine_server --socket /tmp/cadence-engine.sock --spec '{"tts": {"engine": "kokoro"}}'

``--spec`` names what to host: ``tts`` (``TTSConfig`` fields, ``kokoro`` the ``KokoroOptions``) and/or
``asr`` (``ASRConfig`` fields of a Parakeet engine: ``asr.parakeet.remote.StreamHost`` serves its
sessions) and/or ``turn`` (smart-turn on ``{"device": ...}``: ``agent.smart_turn.remote.TurnHost``).

Each connection (one per session process) multiplexes many streams by request id. A ``synth`` runs
the engine's ``synthesize_stream`` here, so phonemization and the batcher's thousands of kernel
launches never share an interpreter with pipecat; each clause's PCM goes back as it is synthesized.
A ``cancel`` (the caller barged in or hung up), or the connection closing, closes the stream, which
withdraws its queued clause from the batcher. The socket is bound only after the engine is loaded
and warmed, so a client's ``hello`` answering means ready. SIGTERM/SIGINT: stop serving, close the
engine, remove the socket, exit 0.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import gc
import importlib
import json
import logging
import os
import signal
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from agent.engine_watchdog import hosted_batchers, watch_ticks
from transports.engine_link import WireError, encode, read_message
from tts.engines import TTSEngine, create_engine
from tts.options import TTSConfig

log = logging.getLogger("cadence.engine")


def build_engine(spec: dict[str, Any]) -> TTSEngine | None:
    """The TTS ``spec`` names: ``{"tts": TTSConfig fields, "kokoro": KokoroOptions fields (optional)}``."""
    if "tts" not in spec:
        return None
    tts = TTSConfig(**spec["tts"])
    if spec.get("kokoro"):
        from tts.kokoro.options import KokoroOptions

        tts.kokoro = KokoroOptions(**spec["kokoro"])  # type: ignore[attr-defined]  # create_engine reads it
    return create_engine(tts)


def build_asr(spec: dict[str, Any]) -> Any:
    """The process's Parakeet ``StreamBatcher`` (loaded and warmed) when ``spec`` has ``asr``; else None."""
    if "asr" not in spec:
        return None
    from asr.options import ASRConfig
    from asr.parakeet.shared_engine import shared_parakeet_batcher

    config = ASRConfig(**spec["asr"])
    if config.engine != "parakeet":
        raise ValueError(f"the engine process hosts streaming Parakeet only, not asr.engine = {config.engine!r}")
    return shared_parakeet_batcher(config)


def build_turn(spec: dict[str, Any]) -> Any:
    """The process's smart-turn ``TurnBatcher`` (loaded and warmed on ``spec["turn"]["device"]``), or None."""
    if "turn" not in spec:
        return None
    from agent.smart_turn.batcher import TurnBatcher

    options = spec["turn"]
    batcher = TurnBatcher(device=options.get("device", "cpu"), max_batch=int(options.get("max_batch", 64)),
                          weights=options.get("weights", ""))
    batcher.warm()
    return batcher


def engine_stats(engine: TTSEngine) -> dict[str, Any]:
    """The batcher's counters (batch sizes included) where the engine has one."""
    batcher = getattr(engine, "batcher", None)
    if batcher is None:
        return {}
    stats = dataclasses.asdict(batcher.stats)
    stats["batch_sizes"] = {str(k): v for k, v in sorted(batcher.stats.batch_sizes.items())}
    return {**stats, "pending": batcher.pending, "in_flight": batcher.in_flight}


async def _pieces(engine: TTSEngine, text: str, speed: float | None, seed: int | None) -> AsyncIterator[bytes]:
    stream = getattr(engine, "synthesize_stream", None)
    if stream is not None:
        kwargs = {k: v for k, v in (("speed", speed), ("seed", seed)) if v is not None}
        async with contextlib.aclosing(stream(text, **kwargs)) as pieces:
            async for pcm in pieces:
                yield pcm
        return
    iterator = iter(engine.synthesize(text))  # a blocking engine (Piper, flite): piece by piece in a thread
    while (pcm := await asyncio.to_thread(next, iterator, None)) is not None:
        yield pcm


def measured_peak(fn: Any, device: int, peaks: dict[str, int], stage: str) -> Any:
    """Run ``fn()``; on CUDA record in ``peaks[stage]`` how far torch's allocator peak rose above what was
    held before (what ``agent.gpu_memory.StagePeaks`` measures in a session process)."""
    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_available():
        return fn()
    torch.cuda.synchronize(device)
    before = torch.cuda.memory_allocated(device)
    torch.cuda.reset_peak_memory_stats(device)
    try:
        return fn()
    finally:
        torch.cuda.synchronize(device)
        peaks[stage] = max(0, int(torch.cuda.max_memory_allocated(device) - before))


class EngineServer:
    """Serves ``engine`` on the Unix socket ``path`` (see the module docstring)."""

    def __init__(self, engine: TTSEngine | None, path: str | Path, asr: Any = None, turn: Any = None):
        self.engine = engine
        self.asr = asr
        self.turn = turn  # agent.smart_turn.batcher.TurnBatcher, or None
        self.path = str(path)
        self.streams_served = 0
        self._server: asyncio.AbstractServer | None = None
        self._holds = 0
        self._hold_stack = contextlib.ExitStack()
        self.peaks: dict[str, int] = {}  # per hosted stage: CUDA allocator peak over load + warm-up

    async def start(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)  # a stale socket of a previous run
        self._server = await asyncio.start_unix_server(self._connection, self.path)
        os.chmod(self.path, 0o600)  # this user's session processes only

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 2.0)
        self._hold_stack.close()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)

    def hello(self) -> dict[str, Any]:
        info: dict[str, Any] = {"pid": os.getpid(), "peaks": self.peaks, "gc_frozen": gc.get_freeze_count()}
        if self.engine is not None:
            memory = getattr(self.engine, "memory", None)
            info.update(name=self.engine.name, sample_rate=self.engine.sample_rate,
                        memory=memory.as_dict() if memory is not None else None)
        if self.asr is not None:
            source = getattr(getattr(self.asr.engine, "checkpoint", None), "source", "") or ""
            info["asr"] = {"sample_rate": self.asr.config.sample_rate, "model": Path(str(source)).name or "parakeet-tdt"}
        if self.turn is not None:
            info["turn"] = {"device": str(self.turn.device), "max_batch": self.turn.max_batch}
        return info

    def _call(self, what: str) -> dict[str, Any]:
        if what == "hello":
            return self.hello()
        if what == "stats":
            asr = dataclasses.asdict(self.asr.stats) if self.asr is not None else None
            turn = dataclasses.asdict(self.turn.stats) if self.turn is not None else None
            return {"stats": engine_stats(self.engine), "streams": self.streams_served, "asr": asr, "turn": turn}
        batcher = getattr(self.engine, "batcher", None)
        if what in ("hold", "release") and batcher is not None:  # tests and ordered warm-ups: queue, do not tick
            if what == "hold":
                self._hold_stack.enter_context(batcher.held())
            else:
                self._hold_stack.close()
                self._hold_stack = contextlib.ExitStack()
            return {}
        raise ValueError(f"unknown call {what!r}")

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        streams: dict[int, asyncio.Task] = {}
        host = turns = None
        try:
            while True:
                header, payload = await read_message(reader)
                op, rid = header["op"], header.get("id")
                if op == "turn":
                    if self.turn is None:
                        writer.write(encode({"op": "error", "id": rid, "message": "this engine process has no "
                                             "smart-turn model (vad.turn_model)"}))
                        continue
                    if turns is None:
                        from agent.smart_turn.remote import TurnHost

                        turns = TurnHost(self.turn, lambda h: writer.is_closing() or writer.write(encode(h)))
                    turns.handle(header, payload)
                elif op.startswith("asr_"):
                    if self.asr is None:
                        writer.write(encode({"op": "error", "id": rid, "message": "this engine process has no ASR"}))
                        continue
                    if host is None:
                        from asr.parakeet.remote import StreamHost

                        host = StreamHost(self.asr, lambda h: writer.is_closing() or writer.write(encode(h)))
                    host.handle(header, payload)
                elif self.engine is None and op in ("synth", "cancel"):
                    writer.write(encode({"op": "error", "id": rid, "message": "this engine process has no TTS"}))
                elif op == "synth":
                    task = asyncio.create_task(self._stream(writer, rid, header))
                    streams[rid] = task
                    task.add_done_callback(lambda _t, rid=rid: streams.pop(rid, None))
                elif op == "cancel":
                    if (task := streams.get(rid)) is not None:
                        task.cancel()
                elif op == "call":
                    try:
                        writer.write(encode({"op": "reply", "id": rid, **self._call(header.get("what", ""))}))
                    except ValueError as exc:
                        writer.write(encode({"op": "error", "id": rid, "message": str(exc)}))
                else:
                    raise WireError(f"unknown op {op!r}")
        except (asyncio.IncompleteReadError, ConnectionError):
            pass  # the session process closed the connection (or died)
        except asyncio.CancelledError:
            pass  # this server is stopping (SIGTERM) with the connection open: close it quietly below
        except WireError as exc:
            log.error("engine: dropping a connection: %s", exc)
        except ValueError as exc:
            log.error("engine: dropping a connection: %s", exc)
        finally:
            for task in list(streams.values()):
                task.cancel()  # its callers are gone: withdraw their queued clauses
            if host is not None:
                host.close()
            if turns is not None:
                turns.close()
            writer.close()

    async def _stream(self, writer: asyncio.StreamWriter, rid: int, header: dict) -> None:
        self.streams_served += 1
        try:
            async with contextlib.aclosing(_pieces(self.engine, str(header.get("text", "")), header.get("speed"),
                                                   header.get("seed"))) as pieces:
                async for pcm in pieces:
                    if writer.is_closing():
                        return
                    writer.write(encode({"op": "audio", "id": rid}, pcm))
                    await writer.drain()
            writer.write(encode({"op": "end", "id": rid}))
        except asyncio.CancelledError:
            raise
        except ConnectionError:
            pass
        except Exception as exc:  # this stream failed; the engine keeps serving the others
            log.exception("engine: stream %s failed", rid)
            if not writer.is_closing():
                writer.write(encode({"op": "error", "id": rid, "message": f"{type(exc).__name__}: {exc}"}))


def _phases(engine: Any) -> dict[str, float]:
    """Kokoro's per-phase seconds (``KokoroModel.phase_s``, summed with the first-clause lane's) where the engine has
    them; else empty."""
    model = getattr(getattr(engine, "batcher", None), "model", None)
    out = dict(getattr(model, "phase_s", None) or {})
    for key, seconds in (getattr(getattr(engine, "first_model", None), "phase_s", None) or {}).items():
        out[key] = out.get(key, 0.0) + seconds
    return out


def _graph_counts(engine: Any) -> str:
    """Kokoro's text and decoder graphs so far: replays, batches replayed in groups of rows, batches with rows run
    eagerly."""
    model = getattr(getattr(engine, "batcher", None), "model", None)
    lane = getattr(engine, "first_model", None)  # the first-clause lane's graphs
    sets = [("text", getattr(model, "text_graphs", None)), ("decoder", getattr(model, "graphs", None)),
            ("first-lane text", getattr(lane, "text_graphs", None)), ("first-lane decoder", getattr(lane, "graphs", None))]
    parts = [f"{name} graphs replays {g.replays} split {g.split_batches} eager {g.fallbacks}"
             for name, g in sets if g is not None]
    return "".join("; " + p for p in parts)


def _ms_quantile(values: list[float], q: float) -> str:
    """The ``q`` quantile of ``values`` (seconds) in whole ms, nearest rank; "-" for none."""
    if not values:
        return "-"
    ordered = sorted(values)
    return f"{ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1e3:.0f}"


async def report_load(server: EngineServer, every_s: float, tick_s: float = 0.05) -> None:
    """Log, every ``every_s``: this process's CPU share, the event loop's lag (worst and p99 of ``tick_s``
    sleeps), and what each hosted batcher did in the interval (ticks, mean batch, busy share, queue).
    It tells a GIL-starved engine (CPU near 1.0, loop lag up) from a GPU-bound one (busy near 1.0)."""
    loop = asyncio.get_running_loop()
    cpu0, wall0 = time.process_time(), loop.time()
    tts0 = dataclasses.asdict(server.engine.batcher.stats) if getattr(server.engine, "batcher", None) else None
    phases0 = _phases(server.engine)
    asr0 = dataclasses.asdict(server.asr.stats) if server.asr is not None else None
    turn0 = dataclasses.asdict(server.turn.stats) if server.turn is not None else None
    lags: list[float] = []
    while True:
        before = loop.time()
        await asyncio.sleep(tick_s)
        lags.append(loop.time() - before - tick_s)
        if loop.time() - wall0 < every_s:
            continue
        cpu, wall = time.process_time(), loop.time()
        lags.sort()
        parts = [f"cpu {(cpu - cpu0) / (wall - wall0):.2f}",
                 f"loop lag p99 {lags[int(0.99 * (len(lags) - 1))] * 1e3:.0f} max {lags[-1] * 1e3:.0f} ms",
                 f"streams {server.streams_served}"]
        if tts0 is not None:
            batcher = server.engine.batcher  # type: ignore[union-attr]
            now = dataclasses.asdict(batcher.stats)
            ticks, utts = now["ticks"] - tts0["ticks"], now["utterances"] - tts0["utterances"]
            parts.append(f"tts ticks {ticks} mean batch {utts / ticks if ticks else 0:.1f} busy "
                         f"{(now['busy_s'] - tts0['busy_s']) / (wall - wall0):.2f} audio "
                         f"{now['audio_s'] - tts0['audio_s']:.0f} s pending {batcher.pending} oom splits "
                         f"{now['oom_splits'] - tts0['oom_splits']}{_graph_counts(server.engine)}")
            if batcher.first_lane:  # of those, the first-clause lane's (busy above sums both lanes)
                lane_ticks = now["first_lane_ticks"] - tts0["first_lane_ticks"]
                lane_utts = now["first_lane_utterances"] - tts0["first_lane_utterances"]
                parts.append(f"first lane ticks {lane_ticks} mean batch {lane_utts / lane_ticks if lane_ticks else 0:.1f}")
            tts0 = now
            waits, ticks_s = batcher.drain_timings()
            if ticks_s:  # what a first clause waited in the queue, and what the ticks ahead of it cost
                parts.append(f"first-clause wait p50 {_ms_quantile(waits, 0.5)} p99 {_ms_quantile(waits, 0.99)} ms "
                             f"(n {len(waits)}), tick p50 {_ms_quantile(ticks_s, 0.5)} p99 "
                             f"{_ms_quantile(ticks_s, 0.99)} ms")
            phases = _phases(server.engine)
            if phases:  # where Kokoro's batches spent that time (issuing work vs waiting for the GPU)
                parts.append("kokoro " + " ".join(f"{k} {(v - phases0.get(k, 0.0)) / (wall - wall0):.2f}"
                                                   for k, v in phases.items()))
            phases0 = phases
        if asr0 is not None:
            now = dataclasses.asdict(server.asr.stats)
            ticks = now["ticks"] - asr0["ticks"]
            parts.append(f"asr ticks {ticks} windows/tick {(now['windows'] - asr0['windows']) / ticks if ticks else 0:.1f}"
                         f" busy {(now['busy_s'] - asr0['busy_s']) / (wall - wall0):.2f}"
                         f" (device {(now['device_s'] - asr0['device_s']) / (wall - wall0):.2f})")
            asr0 = now
        if turn0 is not None:
            now = dataclasses.asdict(server.turn.stats)
            batches = now["batches"] - turn0["batches"]
            parts.append(f"turn requests {now['requests'] - turn0['requests']} batches {batches} busy "
                         f"{(now['busy_s'] - turn0['busy_s']) / (wall - wall0):.2f}")
            turn0 = now
        log.info("engine load: %s", "; ".join(parts))
        cpu0, wall0, lags = cpu, wall, []


async def serve(spec: dict[str, Any], path: str, memory_fraction: float = 0.0, device: int = 0,
                switch_interval_ms: float = 0.0, report_s: float = 0.0, stall_exit_s: float = 0.0,
                gc_freeze: bool = False) -> None:
    """Load and warm the engines, serve until SIGTERM/SIGINT, then clean up. ``gc_freeze``: once warm, the heap
    (torch, the models, ~390,000 objects for Parakeet) is moved out of the collector's reach, so a full collection
    no longer holds the GIL over it while the batcher threads wait."""
    if switch_interval_ms > 0:  # the batcher threads hand the GIL back sooner (agent.runtime's reasoning)
        sys.setswitchinterval(switch_interval_ms / 1000.0)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    if memory_fraction > 0:
        import torch

        if torch.cuda.is_available():
            torch.cuda.set_per_process_memory_fraction(memory_fraction, device)
    t0 = time.monotonic()
    peaks: dict[str, int] = {}
    engine = await asyncio.to_thread(measured_peak, lambda: build_engine(spec), device, peaks, "tts")
    try:
        asr = await asyncio.to_thread(measured_peak, lambda: build_asr(spec), device, peaks, "asr")
        turn = await asyncio.to_thread(measured_peak, lambda: build_turn(spec), device, peaks, "turn")
        if engine is not None:
            async with contextlib.aclosing(_pieces(engine, "Hello there.", None, None)) as warm:
                async for _ in warm:  # one stream end to end: phonemizer and batcher paths warm
                    pass
        server = EngineServer(engine, path, asr, turn)
        server.peaks = {k: v for k, v in peaks.items() if (k == "tts" and engine) or (k == "asr" and asr)}
        if turn is not None and (asr is not None or engine is not None):  # smart-turn lives in that stage's share
            host = "asr" if asr is not None else "tts"
            server.peaks[host] = server.peaks.get(host, 0) + peaks.get("turn", 0)
        await server.start()
        if gc_freeze:
            from agent.runtime import freeze_gc_heap

            # the hosts a session's first request builds (smart-turn's and the streams' ops) come in frozen too
            for module, hosted_here in (("agent.smart_turn.remote", turn), ("asr.parakeet.remote", asr)):
                if hosted_here is not None:
                    importlib.import_module(module)
            freeze_gc_heap()
        hosted = [f"tts={engine.name}"] if engine is not None else []
        hosted += ["asr=parakeet"] if asr is not None else []
        hosted += [f"turn=smart-turn-v3 on {turn.device}"] if turn is not None else []
        log.info("engine ready: %s on %s in %.1f s (pid %d)", " ".join(hosted) or "nothing", path,
                 time.monotonic() - t0, os.getpid())
        reporter = asyncio.create_task(report_load(server, report_s)) if report_s > 0 else None
        batchers = hosted_batchers(engine, asr, turn)
        watchdog = asyncio.create_task(watch_ticks(batchers, stall_exit_s)) if stall_exit_s > 0 and batchers else None
        try:
            await stop.wait()
        finally:
            for task in (reporter, watchdog):
                if task is not None:
                    task.cancel()
            await server.close()
    finally:
        close = getattr(engine, "close", None) if engine is not None else None
        if close is not None:
            close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m agent.engine_server", description=__doc__.split("\n\n")[0])
    parser.add_argument("--socket", required=True, help="Unix socket path to listen on")
    parser.add_argument("--spec", default="{}", help='JSON: {"tts": {...TTSConfig}, "kokoro": {...KokoroOptions}}')
    parser.add_argument("--memory-fraction", type=float, default=0.0, help="cap torch's CUDA allocator (0: none)")
    parser.add_argument("--device", type=int, default=0)
    parser.add_argument("--switch-interval-ms", type=float, default=0.0, help="GIL switch interval (0: Python's)")
    parser.add_argument("--report-s", type=float, default=0.0,
                        help="log CPU share, loop lag and batcher activity every this many seconds (0: never)")
    parser.add_argument("--gc-freeze", action="store_true", help="freeze the GC heap once the engines are warm")
    parser.add_argument("--stall-exit-s", type=float, default=0.0,
                        help="exit (code 75) when a batcher's tick has run this long: a hung GPU (0: never)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s engine %(levelname)s %(message)s")
    try:
        spec = json.loads(args.spec)
    except ValueError as exc:
        parser.error(f"--spec is not JSON: {exc}")
    asyncio.run(serve(spec, args.socket, args.memory_fraction, args.device, args.switch_interval_ms, args.report_s,
                      args.stall_exit_s, args.gc_freeze))
    return 0


if __name__ == "__main__":
    sys.exit(main())
