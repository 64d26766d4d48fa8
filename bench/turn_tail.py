"""Where a capacity level's slowest turns spent their time, per turn: each caller's turns (the records of
``cadence capacity --records``) joined with the server's own stage latencies for the same turns (the lines
``server.log_call_turns`` writes at each hang-up), then the server stages' medians over all turns against those
over the slowest ``--tail`` of them by the caller's first audio.

    python3 bench/turn_tail.py RECORDS.json.gz SERVE.log [--tail 0.05]

A caller's turn is matched to the server turn of the same call (session ``phone-<stream sid>``) whose VAD stop
comes first after the caller's last audible sample and before its next prompt starts; both clocks are the host's
``time.monotonic()``. Only turns inside the judged hold count, as in the level's figures.
"""

from __future__ import annotations

import argparse
import gzip
import json
import re
import statistics
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agent.capacity.phone_caller import PhoneCallRecord  # noqa: E402
from agent.capacity.phone_ramp import phone_turns  # noqa: E402

LINE = re.compile(r"session (\S+): turns (\[.*\])\s*$")
# (name, from event, to event) over the server's event times (``TurnTiming.event_times``, monotonic s); a
# speculative reply's LLM and TTS events may come before the turn's end (negative stages)
STAGES = (("transcript", "end_of_speech", "transcript"), ("turn_end", "end_of_speech", "turn_end"),
          ("llm_first_token (from the turn end)", "turn_end", "llm_first_token"),
          ("first_clause", "llm_first_token", "tts_start"), ("tts_first_audio", "tts_start", "tts_first_audio"),
          ("audio_out", "tts_first_audio", "first_audio_out"), ("first_audio (server)", "end_of_speech",
                                                               "first_audio_out"))


# a turn whose end came this long after the VAD stop waited the silence fallback (`vad.turn_fallback_secs`, 0.8 s
# in gpu.toml): the turn model judged it unfinished at the stop, whatever the machine did
FALLBACK_AFTER_STOP_S = 0.5


def stages(at: dict[str, float]) -> dict[str, float]:
    """The turn's stage latencies (ms) from its event times."""
    return {name: (at[b] - at[a]) * 1000.0 for name, a, b in STAGES if a in at and b in at}


def waited_fallback(at: dict[str, float]) -> bool:
    """Whether the server ended the turn on the silence fallback rather than at the VAD stop."""
    return "turn_end" in at and at["turn_end"] - at["vad_stop"] >= FALLBACK_AFTER_STOP_S


def percentile(values: list[float], q: float) -> float:
    """numpy's (linear) percentile, as `cadence capacity` reports its levels."""
    return float(np.percentile(values, q))


def server_turns(log: str) -> dict[str, list[dict]]:
    """Per session id, its turns as the server logged them at the hang-up (sorted by VAD stop)."""
    out: dict[str, list[dict]] = {}
    for line in log.splitlines():
        m = LINE.search(line)
        if m:
            turns = [t for t in json.loads(m.group(2)) if "vad_stop" in t.get("at", {})]
            out[m.group(1)] = sorted(turns, key=lambda t: t["at"]["vad_stop"])
    return out


def joined(records: dict, log: str) -> tuple[list[tuple[float, dict, bool]], int]:
    """(the caller's first audio ms, the server turn's latencies, whether it waited the silence fallback) for every
    answered turn in the hold that a logged server turn matches, and how many answered turns the hold had."""
    start, end = records["hold"]
    by_session = server_turns(log)
    out, answered = [], 0
    for raw in records["callers"]:
        record = PhoneCallRecord(**{k: raw[k] for k in PhoneCallRecord.__dataclass_fields__ if k in raw})
        server = by_session.get(f"phone-{record.stream_sid}", [])
        for i, turn in enumerate(phone_turns(record)):
            if turn.first_audio_ms is None or not start <= turn.eos < end:
                continue
            answered += 1
            nxt = record.speech_starts[i + 1] if i + 1 < len(record.speech_starts) else float("inf")
            match = next((t for t in server if turn.eos - 0.05 <= t["at"]["vad_stop"] < nxt), None)
            if match is not None:
                out.append((turn.first_audio_ms, stages(match["at"]), waited_fallback(match["at"])))
    return out, answered


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("records", type=Path)
    ap.add_argument("serve_log", type=Path)
    ap.add_argument("--tail", type=float, default=0.05, help="the slowest share of turns to split (default 0.05)")
    args = ap.parse_args()
    with gzip.open(args.records) as f:
        records = json.load(f)
    pairs, answered = joined(records, args.serve_log.read_text(errors="replace"))
    if not pairs:
        sys.exit("no caller turn matched a logged server turn: was server.log_call_turns on?")
    pairs.sort(key=lambda p: p[0])
    tail = pairs[-max(1, round(len(pairs) * args.tail)):]
    print(f"{len(pairs)} of the hold's {answered} answered turns joined; the slowest {len(tail)} (caller first audio >= {tail[0][0]:.0f} ms):")
    print("| stage (server) | median, all turns | median, slowest turns | max, slowest turns |")
    print("|---|---|---|---|")
    for stage, _, _ in STAGES:
        every = [p[1][stage] for p in pairs if stage in p[1]]
        slow = [p[1][stage] for p in tail if stage in p[1]]
        if every and slow:
            print(f"| {stage} | {statistics.median(every):.0f} | {statistics.median(slow):.0f} | {max(slow):.0f} |")
    caller = [p[0] for p in pairs]
    print(f"| caller first audio | {statistics.median(caller):.0f} | {statistics.median([p[0] for p in tail]):.0f}"
          f" | {tail[-1][0]:.0f} |")
    print(f"\nCaller first audio by how the server ended the turn (the fallback: a turn end >= {FALLBACK_AFTER_STOP_S} s"
          " after the VAD stop):")
    for label, fell_back in (("at the VAD stop (turn model: finished)", False), ("on the silence fallback", True)):
        group = [p[0] for p in pairs if p[2] is fell_back]
        if group:
            print(f"  {label}: p50 / p95 / p99 {percentile(group, 50):,.0f} / {percentile(group, 95):,.0f} / "
                  f"{percentile(group, 99):,.0f} ms (n {len(group)}, {len(group) / len(pairs):.0%})")


if __name__ == "__main__":
    main()
