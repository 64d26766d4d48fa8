"""Last voiced sample sent -> first bot audio received, over real loopback WebRTC: Cadence vs stock pipecat.

One run holds both systems on one shared llama.cpp server (SmolLM2-135M, the embedded default's):
``cadence serve`` (embedded CPU default: Whisper tiny.en int8, Piper joe-medium; its own
SmallWebRTC signalling) and stock pipecat 1.14 with the same models behind its own SmallWebRTC
transport (``bench/stock_webrtc_server.py``), each in its own process. A real aiortc client
(``transports.webrtc_client``) calls them alternately, one fresh connection per utterance (clip k:
stock first for even k, Cadence first for odd k), and plays each clip in real time (20 ms Opus
frames at 48 kHz) after ``--lead-in`` seconds of silence. ICE host candidates are loopback only on
all three processes.

Clips: ``testkit.talk_clips`` (the ``cadence talk``/WER clips): 10 recorded Asterisk prompts, two sentences
with a 0.6 s pause mid-sentence (one utterance: answered once) and two pairs of finished sentences 0.8-1.0 s
apart (two turns: answered once per sentence, reported apart). The clock starts when the 20 ms frame holding the clip's last voiced
sample is sent (``testkit.voiced``: 10 ms frames within 35 dB of the loudest, not the file's end) and
stops at the first received bot frame with a sample above ``VOICED_LEVEL``. Per turn, the server's
own record (``GET /api/sessions/{pc_id}``: transcript, reply, LLM responses, event times on the
host's monotonic clock) gives the word error rate, the answer count (answered exactly once = one
LLM response for the utterance; ``answers_heard``: how many of those replies had audio go out, a reply
the caller's next words cut before its first audio was never heard) and the stage split against the
client's clock.

    python bench/webrtc_latency.py                # 12 clips x 2 systems, one round (~5 min)
    python bench/webrtc_latency.py --rounds 3
    python bench/webrtc_latency.py --set asr.engine=moonshine   # Cadence on Moonshine tiny-en (stock keeps Whisper)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import signal
import subprocess
import sys
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any
from urllib.parse import quote

import aiohttp
import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from agent.config import load_config  # noqa: E402
from agent.llm_server import embedded_llama_server  # noqa: E402
from testkit.corpus import wer  # noqa: E402
from testkit.servers import cadence_process, ready_process  # noqa: E402
from testkit.talk_clips import Clip, talk_clips  # noqa: E402
from testkit.voiced import VOICED_DB, VOICED_FLOOR, last_voiced_s  # noqa: E402
from transports.webrtc_client import WebRTCCaller  # noqa: E402

RATE = 16000
VOICED_LEVEL = 300  # a received int16 sample above this is bot speech (Opus silence decodes to ~0)
SYSTEMS = ("stock", "cadence")
ASR_NAMES = {"whisper": "Whisper tiny.en int8", "moonshine": "Moonshine tiny-en (ONNX Runtime)"}


async def wait_reply(caller: WebRTCCaller, since: float, max_wait_s: float, quiet_s: float) -> float | None:
    """First voiced bot audio after ``since``; then wait until the bot is quiet for ``quiet_s``."""
    deadline = time.monotonic() + max_wait_s
    first = None
    while time.monotonic() < deadline:
        first = caller.received.voiced_after(since, VOICED_LEVEL)
        if first is not None:
            break
        await asyncio.sleep(0.02)
    if first is None:
        return None
    while time.monotonic() < deadline:
        now = time.monotonic()
        recent = [p for at, p in caller.received.chunks if at > now - quiet_s]
        if now - first > quiet_s and all(int(np.abs(p).max(initial=0)) <= VOICED_LEVEL for p in recent):
            break
        await asyncio.sleep(0.1)
    return first


async def server_turns(http: aiohttp.ClientSession, url: str, pc_id: str, settle_s: float = 3.0) -> list[dict]:
    """The server's record of this peer's turns, once every turn with an LLM request has its reply."""
    deadline = time.monotonic() + settle_s
    turns: list[dict] = []
    while time.monotonic() < deadline:
        async with http.get(f"{url}/api/sessions/{quote(pc_id, safe='')}") as r:
            turns = (await r.json()).get("turns", []) if r.status == 200 else []
        if turns and all(t.get("reply") or not t.get("llm_requests") for t in turns):
            break
        await asyncio.sleep(0.2)
    return turns


def stage_split(turns: list[dict], voiced_sent: float, first_rx: float | None) -> dict[str, float]:
    """Where the time went, on the host's monotonic clock: client send -> server events -> client receive."""
    at = next((t["at"] for t in turns if t.get("llm_requests")), turns[-1]["at"] if turns else {})
    out: dict[str, float] = {}
    chain = [("sent", voiced_sent), ("vad_end_of_speech", at.get("end_of_speech")), ("vad_stop", at.get("vad_stop")),
             ("transcript", at.get("transcript")), ("turn_end", at.get("turn_end")), ("llm_start", at.get("llm_start")),
             ("llm_first_token", at.get("llm_first_token")),
             ("tts_first_audio", at.get("tts_first_audio")), ("first_audio_out", at.get("first_audio_out")),
             ("received", first_rx)]
    for name, t in chain[1:]:
        if t is not None:
            out[f"sent_to_{name}_ms"] = round((t - voiced_sent) * 1000.0, 1)
    if at.get("first_audio_out") is not None and first_rx is not None:
        out["server_out_to_received_ms"] = round((first_rx - at["first_audio_out"]) * 1000.0, 1)
    return out


def cpu_s(pid: int | None) -> float:
    """User + system CPU seconds of a process so far (0.0 if it cannot be read)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError, TypeError):
        return 0.0


async def one_call(system: str, url: str, clip: Clip, args: argparse.Namespace,
                   pids: dict[str, int] | None = None) -> dict[str, Any]:
    pid = (pids or {}).get(system)
    cpu0 = cpu_s(pid)
    caller = WebRTCCaller(url, jitter_frames=args.client_jitter_frames)
    voiced = last_voiced_s(clip.audio, RATE)
    row: dict[str, Any] = {"system": system}
    try:
        await caller.connect()
        await caller.wait_connected()
        await asyncio.sleep(args.lead_in)
        caller.say(clip.audio, voiced_end_s=voiced)
        await asyncio.wait_for(caller.mic.idle.wait(), timeout=120)
        sent = caller.mic.voiced_end_times[-1]
        onset = caller.mic.speech_onset_times[-1] if caller.mic.speech_onset_times else sent
        first = await wait_reply(caller, sent, args.max_wait, args.quiet)
        early = caller.received.voiced_after(onset, VOICED_LEVEL)
        async with aiohttp.ClientSession() as http:
            turns = await server_turns(http, url, caller.pc_id or "")
    except (OSError, TimeoutError, ValueError, aiohttp.ClientError) as exc:  # refused, no ICE, bad answer
        row.update({"error": repr(exc), "heard": "", "reply": "", "wer": 1.0, "answers": 0, "answered": False,
                    "bot_audio_before_speech_end": False, "last_voiced_to_first_audio_ms": None,
                    "server_stages_ms": {}, "split_ms": {}, "server_cpu_s": None})
        return row
    finally:
        await caller.close()
    heard = " ".join(t.get("transcript", "") for t in turns).strip()
    answers = sum(int(t.get("llm_requests", 0)) for t in turns)
    # Replies whose audio went out at all: a reply cut by the caller's next words before its first audio
    # was never heard (and left nothing in the context), though it counts in ``answers``.
    heard_replies = sum(1 for t in turns if t.get("llm_requests") and "first_audio_out" in t.get("at", {}))
    row.update({
        "heard": heard, "reply": " | ".join(t.get("reply", "") for t in turns if t.get("reply")),
        "wer": wer(clip.text, heard), "answers": answers, "answers_heard": heard_replies,
        "answered": first is not None,
        "bot_audio_before_speech_end": early is not None and early < sent,
        "last_voiced_to_first_audio_ms": None if first is None else round((first - sent) * 1000.0, 1),
        "server_stages_ms": next((t["latency_ms"] for t in turns if t.get("llm_requests")), {}),
        "split_ms": stage_split(turns, sent, first),
        "server_cpu_s": round(cpu_s(pid) - cpu0, 2) if pid else None,  # the call, connect to hang-up
    })
    return row


def rss_mb(pid: int) -> dict[str, float]:
    out = {}
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                out[key] = round(int(value.split()[0]) / 1024, 1)
    except OSError:
        pass
    return out


def summarize(values: list[float]) -> dict[str, float]:
    if not values:
        return {"n": 0}
    return {"n": len(values), "p50": round(float(np.percentile(values, 50)), 1),
            "p90": round(float(np.percentile(values, 90)), 1), "max": round(float(np.max(values)), 1)}


def totals(rows: list[dict], system: str, clips: list[Clip]) -> dict[str, Any]:
    mine = [r for r in rows if r["system"] == system]
    utterances = [r for r in mine if r.get("kind") != "two_sentences"]
    pairs = [r for r in mine if r.get("kind") == "two_sentences"]
    words = {c.name: len(c.text.split()) for c in clips}
    errors = sum(r["wer"] * words[r["clip"]] for r in mine)
    n_words = sum(words[r["clip"]] for r in mine)
    split_keys = sorted({k for r in mine for k in r["split_ms"]})
    stage_keys = sorted({k for r in mine for k in r["server_stages_ms"]})
    return {
        "last_voiced_to_first_audio_ms": summarize([r["last_voiced_to_first_audio_ms"] for r in mine
                                                    if r["last_voiced_to_first_audio_ms"] is not None]),
        "utterances": len(utterances),
        "answered": sum(r["answered"] for r in mine),
        "answered_exactly_once": sum(r["answers"] == 1 and r["answered"] for r in utterances),
        "answered_more_than_once": sum(r["answers"] > 1 for r in utterances),
        "one_reply_heard": sum(r.get("answers_heard") == 1 and r["answered"] for r in utterances),
        "two_sentence_clips": len(pairs),
        "two_sentence_clips_answered_per_sentence": sum(r["answers"] == 2 for r in pairs),
        "bot_audio_before_speech_end": sum(r["bot_audio_before_speech_end"] for r in mine),
        "wer": round(errors / n_words, 4) if n_words else None,
        "empty_transcripts": sum(not r["heard"] for r in mine),
        "failed_calls": sum("error" in r for r in mine),
        "server_cpu_s_per_call_p50": round(float(np.median([r["server_cpu_s"] for r in mine
                                                            if r["server_cpu_s"] is not None] or [0])), 2),
        "split_p50_ms": {k: round(float(np.median([r["split_ms"][k] for r in mine if k in r["split_ms"]])), 1)
                         for k in split_keys},
        "server_stages_p50_ms": {k: round(float(np.median([r["server_stages_ms"][k] for r in mine
                                                           if k in r["server_stages_ms"]])), 1) for k in stage_keys},
    }


def load_average() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


async def run(args: argparse.Namespace, urls: dict[str, str], clips: list[Clip], pids: dict[str, int]) -> list[dict]:
    systems = tuple(s for s in SYSTEMS if s in urls)
    for system in systems:  # one discarded warm-up call each (first-connection costs)
        await one_call(system, urls[system], clips[0], args)
    rows = []
    for rnd in range(args.rounds):
        for k, clip in enumerate(clips):
            order = systems if k % 2 == 0 else systems[::-1]
            for system in order:
                row = await one_call(system, urls[system], clip, args, pids)
                row.update({"round": rnd, "clip": clip.name, "kind": clip.kind, "text": clip.text,
                            "load": load_average()})
                rows.append(row)
                ms = row["last_voiced_to_first_audio_ms"]
                print(f"r{rnd} {clip.name:28s} {system:7s} {'none' if ms is None else f'{ms:6.0f} ms'} "
                      f"answers={row['answers']} wer={row['wer']:.2f} {row['heard']!r}", flush=True)
                await asyncio.sleep(args.gap)
    return rows


def main(args: argparse.Namespace) -> dict[str, Any]:
    config = load_config(args.config, args.set)
    clips = [c for c in talk_clips(RATE) if c.kind in args.kinds.split(",")]
    if args.clips:
        clips = clips[: args.clips]
    log_dir = Path(args.log_dir) if args.log_dir else None
    if log_dir is not None:
        log_dir.mkdir(parents=True, exist_ok=True)

    def llm_server(name: str) -> Any:
        server = embedded_llama_server(config.llm.threads, config.llm.context_size, nice=config.llm.nice,
                                       log_path=log_dir / f"{name}.log" if log_dir else None)
        if args.no_repack:  # see bench/llama_server_no_repack.py
            at = server.command.index("-m")
            server.command[at:at + 2] = [str(ROOT / "bench/llama_server_no_repack.py")]
        return server.start()

    with ExitStack() as stack:
        llm = llm_server("llm")
        stack.callback(llm.stop)
        # --llm-per-system: stock gets a server of its own (the same model and flags), so neither system's
        # requests wait behind or evict the other's prompt state; by default one server is shared.
        stock_llm = llm
        if args.llm_per_system and not args.cadence_only:
            stock_llm = llm_server("llm-stock")
            stack.callback(stock_llm.stop)
        load_before = load_average()
        sets = [f"llm.base_url={llm.base_url}", f"llm.model={llm.model_id}", "server.webrtc_ice_hosts=127.0.0.1",
                "server.log_level=WARNING", *args.set]
        cadence = stack.enter_context(cadence_process(
            ["serve", "--port", "0", *[x for s in sets for x in ("--set", s)]],
            r"Cadence is ready: open (http://\S+?)/ ", log_path=Path(args.log_dir) / "cadence.log" if args.log_dir else None))
        urls = {"cadence": cadence["url"]}
        stock = None
        if not args.cadence_only:
            stock = stack.enter_context(ready_process(
                [sys.executable, str(ROOT / "bench/stock_webrtc_server.py"), "--llm-url", stock_llm.base_url,
                 "--llm-model", stock_llm.model_id], r"stock pipecat is ready: (http://\S+?)/",
                log_path=Path(args.log_dir) / "stock.log" if args.log_dir else None))
            urls["stock"] = stock["url"]
        t0 = time.monotonic()
        pids = {"cadence": cadence["proc"].pid, **({"stock": stock["proc"].pid} if stock else {})}
        rows = asyncio.run(run(args, urls, clips, pids))
        wall = time.monotonic() - t0
        memory = {"cadence_serve": rss_mb(cadence["proc"].pid), "stock_server": rss_mb(stock["proc"].pid) if stock else {},
                  "llm_server" + ("" if stock_llm is not llm else "_shared"): rss_mb(llm.process.pid) if llm.process else {},
                  **({"llm_server_stock": rss_mb(stock_llm.process.pid)} if stock_llm is not llm and stock_llm.process
                     else {})}
    return {
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "commit": subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                                 text=True).stdout.strip(),
        "dirty": bool(subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT,
                                     capture_output=True, text=True).stdout.strip()),
        "machine": f"{platform.machine()} cores={len(os.sched_getaffinity(0))}",
        "conditions": {
            "transport": "aiortc client <-> SmallWebRTC over loopback (ICE host candidates 127.0.0.1 only)",
            "one_connection_per_utterance": True, "lead_in_s": args.lead_in, "rounds": args.rounds,
            "order": "alternating per clip (even: stock first)", "clock": "frame with the last voiced sample sent "
            "-> first received bot frame above |300|", "voiced_rule": {"db_below_peak": VOICED_DB,
                                                                          "rms_floor": VOICED_FLOOR},
            "models": ASR_NAMES.get(config.asr.engine, config.asr.engine) + " (stock: Whisper tiny.en int8), SmolLM2-135M on " + ("a llama.cpp server per system" if stock_llm is not llm
                      else "one shared llama.cpp server") + f" (threads {config.llm.threads}, nice {config.llm.nice}), "
                      "Piper joe-medium",
            "client_jitter_frames": args.client_jitter_frames or "aiortc default (4)",
            "cadence_overrides": args.set, "llama_no_repack": args.no_repack, "load_average_before": load_before, "load_average_after": load_average(),
            "shared_cores": "the 2 cores were shared with other work during the run (see per-row load)",
        },
        "systems": {s: totals(rows, s, clips) for s in SYSTEMS if s in urls},
        "memory_mb": memory, "wall_s": round(wall, 1), "rows": rows,
    }


def report(out: dict[str, Any]) -> None:
    print("\nlast voiced sample sent -> first bot audio received (ms), real WebRTC on loopback")
    print(f"{'system':8s} {'p50':>6s} {'p90':>6s} {'max':>6s} {'once':>7s} {'heard1':>7s} {'WER':>6s}")
    for name, s in out["systems"].items():
        lat = s["last_voiced_to_first_audio_ms"]
        cells = " ".join(f"{lat[k]:6.0f}" if k in lat else f"{'-':>6s}" for k in ("p50", "p90", "max"))
        print(f"{name:8s} {cells} {s['answered_exactly_once']:3d}/{s['utterances']:<3d} "
              f"{s['one_reply_heard']:3d}/{s['utterances']:<3d} {s['wer']:6.3f}  two-sentence clips answered per "
              f"sentence {s['two_sentence_clips_answered_per_sentence']}/{s['two_sentence_clips']}")
        print(f"         split p50: {s['split_p50_ms']}")
    print(f"memory (MB): {out['memory_mb']}")


if __name__ == "__main__":
    # SIGTERM unwinds like Ctrl-C: the ExitStack stops cadence serve, the stock server and the llama.cpp servers
    # (killed without it, the two servers outlived the benchmark)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--clips", type=int, default=0, help="only the first N clips (0: all)")
    parser.add_argument("--kinds", default="single,paused,two_sentences", help="the clip kinds to play")
    parser.add_argument("--lead-in", type=float, default=1.0, help="silence sent before each clip (s)")
    parser.add_argument("--max-wait", type=float, default=15.0, help="longest wait for the bot's reply (s)")
    parser.add_argument("--quiet", type=float, default=1.5, help="the reply is over after this much bot silence")
    parser.add_argument("--gap", type=float, default=0.5, help="pause between calls (s)")
    parser.add_argument("--no-repack", action="store_true",
                        help="start the shared llama.cpp server without AMX/repack buffers (crash on this VM)")
    parser.add_argument("--client-jitter-frames", type=int, default=None,
                        help="the calling client's receive jitter buffer in 20 ms frames (default: aiortc's 4)")
    parser.add_argument("--cadence-only", action="store_true", help="leave stock pipecat out (diagnosis runs)")
    parser.add_argument("--llm-per-system", action="store_true",
                        help="a llama.cpp server for each system instead of one shared (same model and flags)")
    parser.add_argument("--log-dir", help="write the servers' output there (cadence.log, stock.log)")
    parser.add_argument("--config")
    parser.add_argument("--set", action="append", default=[], help="extra cadence serve overrides")
    parser.add_argument("--out", default=str(ROOT / "bench/results/webrtc_latency_cpu.json"))
    cli = parser.parse_args()
    result = main(cli)
    Path(cli.out).write_text(json.dumps(result, indent=2))
    report(result)
    print(f"\nwrote {cli.out}")
