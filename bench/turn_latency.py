"""Last voiced sample -> first bot audio, Cadence's embedded CPU default against stock pipecat, one run.

Both systems hear the same real recorded prompts (Asterisk, 8 kHz upsampled to 16 kHz), one turn per
session (context cleared between turns), played in real time through the same file transport; they
run alternately on the same machine (prompt k: stock then Cadence for even k, the other way round for
odd k) with the same models: Whisper tiny.en int8, SmolLM2-135M on one llama.cpp server, Piper
joe-medium. Stock is ``bench/stock_pipecat.py`` (PEER.md's assembly, nothing of Cadence's pipeline).

The clock starts at the caller's last voiced sample (10 ms frames above an energy threshold, found
in the input, not the file's end) and stops at the first voiced chunk of bot audio the transport
delivers; a turn with no bot audio within the wait is unanswered. Prompts: every installed Asterisk
prompt with words (no word-count filter), or ``--turns N`` of them spread evenly over the set.

    python bench/turn_latency.py                 # every prompt (long: ~10 s per prompt and system)
    python bench/turn_latency.py --turns 24

This is the in-process figure (no network, no codec). What a caller hears over a real WebRTC
client, both systems behind SmallWebRTC in one run, is ``bench/webrtc_latency.py``: the README's
CPU figures come from that one.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import resource
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from agent.config import load_config  # noqa: E402
from agent.llm_server import embedded_llama_server  # noqa: E402
from agent.pipeline import Engines, build_worker  # noqa: E402
from agent.turn_observer import TurnObserver, TurnTiming  # noqa: E402
from bench.stock_pipecat import stock_turn  # noqa: E402
from testkit.corpus import prompts, wer  # noqa: E402
from testkit.voiced import VOICED_DB, VOICED_FLOOR, last_voiced_s  # noqa: E402
from transports.audio_io import load_audio  # noqa: E402
from transports.file_transport import CallScript, FileTransport, run_until_script_done  # noqa: E402
from transports.webrtc import transport_params  # noqa: E402

RATE = 16000
def padded_s(audio: np.ndarray, rate: int = RATE) -> float:
    """The utterance's length as the file transport sends it (whole 20 ms frames)."""
    frame = rate // 50
    return -(-len(audio) // frame) * frame / rate


def first_voiced_after(chunks: list[tuple[float, bytes]], t: float, threshold: int = 200) -> float | None:
    for at, pcm in chunks:
        if at >= t and pcm and int(np.abs(np.frombuffer(pcm, dtype="<i2")).max()) > threshold:
            return at
    return None


@dataclass
class Turn:
    system: str
    heard: str
    reply: str
    speech_end: float | None  # the file's last sample left the microphone (monotonic s)
    chunks: list[tuple[float, bytes]]
    stages_ms: dict[str, float]


async def cadence_turn(engines: Engines, utterance: np.ndarray, max_wait_s: float = 15.0,
                       settle_s: float = 0.5) -> Turn:
    """One turn through Cadence's own pipeline (``agent.pipeline.build_worker``), as ``cadence talk``."""

    cfg = engines.config
    script = CallScript([utterance], max_wait_s=max_wait_s)
    transport = FileTransport(transport_params(cfg.audio.in_sample_rate, cfg.audio.out_sample_rate), script)
    loop = asyncio.get_running_loop()
    observer = TurnObserver(on_turn=lambda _t: loop.call_later(settle_s, script.turn_done.set))
    worker = build_worker(engines, transport, observers=[observer])
    await run_until_script_done(worker, script)
    eos = script.speech_end_times[0] if script.speech_end_times else None
    timing: TurnTiming | None = observer.turns[-1] if observer.turns else None
    stages = timing.stages_ms(end_of_speech=eos) if timing and eos is not None else {}
    return Turn("cadence", timing.transcript_text if timing else "", timing.reply_text.strip() if timing else "",
                eos, list(transport.output().chunks), stages)


async def run_stock(utterance: np.ndarray, server: Any, config: Any) -> Turn:
    llm = config.llm
    turn = await stock_turn(utterance, server.base_url, server.model_id, system_prompt=llm.system_prompt,
                            max_tokens=llm.max_tokens, temperature=llm.temperature,
                            in_rate=config.audio.in_sample_rate, out_rate=config.audio.out_sample_rate)
    return Turn("stock", " ".join(t.strip() for t in turn.transcripts).strip(), turn.reply.strip(),
                turn.speech_end, turn.chunks, {})


def chosen_prompts(turns: int) -> list[Any]:
    every = prompts()  # every installed prompt with words, in name order: no word-count filter
    if turns <= 0 or turns >= len(every):
        return every
    return [every[int(i)] for i in np.linspace(0, len(every) - 1, turns).round()]


def rss_mb(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return float("nan")


def summarize(values: list[float]) -> dict[str, float]:
    if not values:
        return {"n": 0}
    return {"n": len(values), "p50": float(np.percentile(values, 50)), "p90": float(np.percentile(values, 90)),
            "max": float(np.max(values))}


async def main(args: argparse.Namespace) -> dict:
    config = load_config(args.config, args.set)
    chosen = chosen_prompts(args.turns)
    audio = [load_audio(p.path, RATE) for p in chosen]
    warm = load_audio(next(p for p in prompts() if p.name == args.warmup).path, RATE)
    server = embedded_llama_server(config.llm.threads, config.llm.context_size, nice=config.llm.nice)
    await server.astart()
    rows = []
    try:
        engines = await asyncio.to_thread(Engines.load, config, server.base_url, server.model_id)
        await cadence_turn(engines, warm)  # one warm-up turn each, as the peer did
        await run_stock(warm, server, config)
        t0 = time.monotonic()
        for k, (prompt, utterance) in enumerate(zip(chosen, audio, strict=True)):
            order = ["stock", "cadence"] if k % 2 == 0 else ["cadence", "stock"]
            row: dict[str, Any] = {"prompt": prompt.name, "text": prompt.text,
                                   "last_voiced_s": last_voiced_s(utterance), "sent_s": padded_s(utterance)}
            for system in order:
                turn = await (run_stock(utterance, server, config) if system == "stock"
                              else cadence_turn(engines, utterance))
                voiced_end = None if turn.speech_end is None else (
                    turn.speech_end - (row["sent_s"] - row["last_voiced_s"]))
                first = None if voiced_end is None else first_voiced_after(turn.chunks, voiced_end)
                row[system] = {
                    "heard": turn.heard, "reply": turn.reply, "wer": wer(prompt.text, turn.heard),
                    "answered": first is not None,
                    "last_voiced_to_first_audio_ms": None if first is None else (first - voiced_end) * 1000.0,
                    "stages_ms": turn.stages_ms,
                }
            rows.append(row)
            print(f"{prompt.name:32s} stock {_ms(row['stock'])}  cadence {_ms(row['cadence'])}", flush=True)
        wall = time.monotonic() - t0
        llm_peak = rss_mb(server.process.pid) if server.process else float("nan")
    finally:
        server.stop()
    systems = {}
    for system in ("stock", "cadence"):
        latencies = [r[system]["last_voiced_to_first_audio_ms"] for r in rows if r[system]["answered"]]
        systems[system] = {
            "last_voiced_to_first_audio_ms": summarize(latencies),
            "answered": sum(r[system]["answered"] for r in rows),
            "mean_wer": float(np.mean([r[system]["wer"] for r in rows])) if rows else None,
        }
    own_peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "machine": f"{platform.machine()} cores={len(os.sched_getaffinity(0))}",
        "commit": subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                                 text=True).stdout.strip(),
        "turns": len(rows), "voiced_threshold": {"db_below_peak": VOICED_DB, "rms_floor": VOICED_FLOOR},
        "systems": systems,
        # both systems run in this one process: its peak is theirs together, plus the shared LLM server
        "peak_memory_mb": {"both_pipelines": own_peak, "llm_server": llm_peak},
        "wall_s": wall, "rows": rows,
    }


def _ms(result: dict) -> str:
    ms = result["last_voiced_to_first_audio_ms"]
    return f"{ms:7.0f} ms" if ms is not None else "   none   "


def report(out: dict) -> None:
    print(f"\n{out['turns']} turns each, alternating; last voiced sample -> first bot audio (ms)")
    print(f"{'system':10s} {'p50':>7s} {'p90':>7s} {'max':>7s} {'answered':>9s} {'WER':>6s}")
    for name, s in out["systems"].items():
        lat = s["last_voiced_to_first_audio_ms"]
        cells = [f"{lat[k]:7.0f}" if k in lat else f"{'-':>7s}" for k in ("p50", "p90", "max")]
        print(f"{name:10s} {' '.join(cells)} {s['answered']:4d}/{out['turns']:<4d} {s['mean_wer']:6.3f}")
    m = out["peak_memory_mb"]
    print(f"peak memory: both pipelines {m['both_pipelines']:.0f} MB (one process), LLM server {m['llm_server']:.0f} MB")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--turns", type=int, default=0, help="prompts, spread over all of them (0: every prompt)")
    parser.add_argument("--warmup", default="vm-goodbye", help="prompt for the discarded first turn of each system")
    parser.add_argument("--config")
    parser.add_argument("--set", action="append", default=[])
    parser.add_argument("--out", default=str(ROOT / "bench/results/turn_latency_cpu.json"))
    args = parser.parse_args()
    from agent.cli import setup_logging

    setup_logging("WARNING")
    result = asyncio.run(main(args))
    import json

    Path(args.out).write_text(json.dumps(result, indent=2))
    report(result)
    print(f"\nwrote {args.out}")
