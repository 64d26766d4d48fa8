"""End of speech -> first bot audio over the phone path, measured by the caller, on the embedded default.

A Twilio-style caller (``transports.phone.loopback_caller``) places one call to ``cadence serve``
and speaks Asterisk prompts (real 8 kHz telephone speech) in real time, one turn at a time,
waiting for each whole answer. End of speech is when the prompt's last 20 ms packet left the
caller (the file's last sample, as in PEER.md); first audio is when the first voiced ``media``
message arrived back. Also reports the server's own stage timings and the output pacing
figures of the call, and the machine's load (this box may be shared). Writes JSON under
bench/results/.

    python bench/phone_latency.py --turns 12              # starts cadence serve itself
    python bench/phone_latency.py --url http://127.0.0.1:7860 --turns 12
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.barge_in import summary, trial  # noqa: E402
from testkit.corpus import wer  # noqa: E402
from testkit.phone_prompts import pcm8k, prompt, speech_onset_s  # noqa: E402
from transports.phone.loopback_caller import LoopbackCaller  # noqa: E402

PROMPTS = [
    "agent-pass", "cannot-complete-as-dialed", "check-number-dial-again", "conf-getpin",
    "all-circuits-busy-now", "queue-thankyou", "vm-incorrect", "pbx-invalid", "privacy-unident",
    "hello-world", "auth-thankyou", "vm-goodbye", "conf-getconfno", "vm-savedto",
]  # fmt: skip


def stats(values: list[float]) -> dict[str, float | int]:
    return {"n": len(values), "p50": float(np.percentile(values, 50)), "max": float(np.max(values))} if values else {"n": 0}


async def get_json(url: str) -> dict:
    import aiohttp

    async with aiohttp.ClientSession() as http, http.get(url) as r:
        return await r.json()


async def barge_ins(caller: LoopbackCaller, count: int) -> list[dict]:
    """Ask, and speak over the answer 0.3 s into it (``bench/barge_in.py`` runs many more, at random points)."""
    return [await trial(caller, name, "hello-world", 0.3) for name in PROMPTS[:count]]


async def call(url: str, names: list[str], warmup: str, barge_in_count: int = 0) -> dict:
    caller = await LoopbackCaller(url.replace("http://", "ws://") + "/phone/ws").connect()
    await asyncio.sleep(0.5)
    rows = []
    for i, name in enumerate([warmup, *names]):
        audio = pcm8k(name)
        spoken = await caller.say(audio)
        reply = await caller.wait_reply(spoken.last, timeout_s=20)
        first = caller.first_voiced_after(spoken.last)
        voiced_end = spoken.started(len(audio) / 16000 - trailing_silence_s(audio)) + 0.02
        if i > 0:
            rows.append({"prompt": name, "eos_to_first_audio_ms": None if first is None else (first - spoken.last) * 1000,
                         "last_voiced_to_first_audio_ms": None if first is None else (first - voiced_end) * 1000,
                         "reply_s": None if reply is None else reply[1] - reply[0]})
        await asyncio.sleep(0.5)
    record = await get_json(f"{url}/phone/calls/{caller.stream_sid}")
    barge = await barge_ins(caller, barge_in_count)
    await caller.hang_up()
    turns = [t for t in record["turns"] if t["transcript"]][1:]  # drop the warm-up turn
    for row, turn in zip(rows, turns, strict=False):
        row.update(heard=turn["transcript"], reply=turn["reply"], wer=wer(prompt(row["prompt"]).text, turn["transcript"]),
                   server_stages_ms=turn["stages_ms"])
    counted = [b for b in barge if b["counted"]]
    return {"rows": rows, "call": record, "barge_in_rows": barge,
            "barge_in_clear_ms": [b["onset_to_clear_ms"] for b in counted if b["onset_to_clear_ms"] is not None],
            "barge_in_silence_ms": [b["onset_to_silence_ms"] for b in counted]}


def trailing_silence_s(pcm: bytes) -> float:
    reversed_pcm = np.frombuffer(pcm, "<i2")[::-1].astype("<i2").tobytes()
    return speech_onset_s(reversed_pcm)


def loadavg() -> list[float]:
    with contextlib.suppress(OSError):
        return [float(x) for x in Path("/proc/loadavg").read_text().split()[:3]]
    return []


async def main(args: argparse.Namespace) -> dict:
    names = PROMPTS[: args.turns]
    load_before = loadavg()
    if args.url:
        result = await call(args.url, names, args.warmup, args.barge_ins)
    else:
        from testkit.servers import cadence_serve

        if args.phone_options:
            os.environ["CADENCE_PHONE_OPTIONS"] = args.phone_options
        with cadence_serve(*args.set) as server:
            result = await call(server["url"], names, args.warmup, args.barge_ins)
    rows = result["rows"]
    first = [r["eos_to_first_audio_ms"] for r in rows if r["eos_to_first_audio_ms"] is not None]
    stats_out = result["call"]["stats"]
    return {
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "commit": subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                                 text=True).stdout.strip(),
        "cores": len(os.sched_getaffinity(0)),
        "loadavg_before": load_before, "loadavg_after": loadavg(),
        "turns": len(rows), "answered": len(first),
        "mean_wer": float(np.mean([r["wer"] for r in rows if "wer" in r])) if rows else None,
        "eos_to_first_audio_ms": stats(first),
        "last_voiced_to_first_audio_ms": stats([r["last_voiced_to_first_audio_ms"] for r in rows
                                                if r["last_voiced_to_first_audio_ms"] is not None]),
        "server_eos_to_first_audio_ms": stats([r["server_stages_ms"]["eos_to_first_audio"] for r in rows
                                               if "eos_to_first_audio" in r.get("server_stages_ms", {})]),
        "barge_in_clear_ms": {**summary(result["barge_in_clear_ms"]), "values": result["barge_in_clear_ms"]},
        "barge_in_silence_ms": {**summary(result["barge_in_silence_ms"]), "values": result["barge_in_silence_ms"]},
        "barge_in_rows": result["barge_in_rows"],
        "output": {k: stats_out[k] for k in ("output_chunk_lateness_ms", "output_pacer_lateness_ms",
                                             "output_underrun_gap_ms", "underruns", "chunks_out")},
        "rows": rows,
    }


def report(out: dict) -> None:
    e, v = out["eos_to_first_audio_ms"], out["last_voiced_to_first_audio_ms"]
    print(f"\n{out['turns']} turns over the phone path, {out['answered']} answered, mean WER {out['mean_wer']:.3f}")
    print(f"end of speech -> first audio (caller's clock): p50 {e.get('p50', float('nan')):.0f} ms, "
          f"max {e.get('max', float('nan')):.0f} ms")
    print(f"last voiced 20 ms -> first audio:            p50 {v.get('p50', float('nan')):.0f} ms, "
          f"max {v.get('max', float('nan')):.0f} ms")
    for r in out["rows"]:
        ms = r["eos_to_first_audio_ms"]
        print(f"  {r['prompt']:28s} {'-' if ms is None else f'{ms:6.0f}'} ms  heard {r.get('heard', '')!r}")
    b, q = out["barge_in_clear_ms"], out["barge_in_silence_ms"]
    if q["n"]:
        print(f"barge-in: caller's speech onset -> silence at the caller: p50 {q['p50']:.0f} ms, "
              f"p95 {q['p95']:.0f} ms, max {q['max']:.0f} ms {q['values']}")
    if b["n"]:
        print(f"          caller's speech onset -> clear at the caller: p50 {b['p50']:.0f} ms, "
              f"p95 {b['p95']:.0f} ms, max {b['max']:.0f} ms {b['values']}")
    o = out["output"]
    print(f"output chunk lateness {o['output_chunk_lateness_ms']}, pacer {o['output_pacer_lateness_ms']}, "
          f"underruns {o['underruns']} of {o['chunks_out']} chunks")
    print(f"load average before {out['loadavg_before']} after {out['loadavg_after']} on {out['cores']} cores")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--turns", type=int, default=12)
    parser.add_argument("--url", help="a running cadence serve (default: start one)")
    parser.add_argument("--set", action="append", default=[], help="config override for the started server")
    parser.add_argument("--barge-ins", type=int, default=5, help="then speak over this many answers")
    parser.add_argument("--phone-options", default="", help='JSON for $CADENCE_PHONE_OPTIONS, e.g. \'{"barge_in_start_ms": 0}\'')
    parser.add_argument("--warmup", default="vm-goodbye", help="prompt for the discarded first turn")
    parser.add_argument("--out", default=str(ROOT / "bench/results/phone_latency_cpu.json"))
    args = parser.parse_args()
    result = asyncio.run(main(args))
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2))
    report(result)
    print(f"\nwrote {args.out}")
