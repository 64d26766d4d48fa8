"""From chunk arrivals to a verdict: per-turn delivery, per-stream ratio, the knee.

A stream's delivery ratio is its delivered audio seconds per wall second over its replies
(see ``agent.metrics.delivery``); a turn left unanswered counts as 0. The level's figure is the
ratio that 99 % of streams meet or beat (the 1st percentile across streams, numpy's linear
interpolation: with few streams it is close to the worst one).
"""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass, field

import numpy as np

from agent.capacity.caller import CallRecord
from agent.metrics.delivery import PlayoutTracker


@dataclass(frozen=True)
class TurnDelivery:
    caller: int
    eos: float
    answered: bool
    first_audio_ms: float | None
    ratio: float | None
    lateness_ms: tuple[float, ...]  # every chunk after the first
    audio_s: float
    ahead_s: float = 0.0  # audio that arrived before the reply's last burst
    span_s: float = 0.0  # first burst -> last burst


def turn_deliveries(record: CallRecord) -> list[TurnDelivery]:
    """Split a caller's received chunks by the turn they answer and judge each reply."""
    chunks = sorted(record.chunks)
    arrivals = [at for at, _ in chunks]
    out = []
    ends = record.speech_ends
    for i, eos in enumerate(ends):
        nxt = ends[i + 1] - record.speech_seconds[i + 1] if i + 1 < len(ends) else float("inf")
        lo, hi = bisect_left(arrivals, eos), bisect_left(arrivals, nxt)
        tracker = PlayoutTracker()
        lateness = [tracker.chunk(at, seconds) * 1000.0 for at, seconds in chunks[lo:hi]]
        reply = tracker.finish()
        out.append(TurnDelivery(
            caller=record.caller,
            eos=eos,
            answered=reply is not None,
            first_audio_ms=(arrivals[lo] - eos) * 1000.0 if reply is not None else None,
            ratio=reply.ratio if reply is not None else None,
            lateness_ms=tuple(lateness[1:]),
            audio_s=reply.audio_s if reply is not None else 0.0,
            ahead_s=reply.ahead_s if reply is not None else 0.0,
            span_s=reply.span_s if reply is not None else 0.0,
        ))
    return out


def stream_ratio(turns: list[TurnDelivery]) -> float | None:
    """The stream's delivered audio per wall second over its paced replies (0 if a turn went
    unanswered); None with no reply that had anything to pace."""
    if any(not t.answered for t in turns):
        return 0.0
    paced = [t for t in turns if t.ratio is not None]
    span = sum(t.span_s for t in paced)
    return sum(t.ahead_s for t in paced) / span if span > 0 else None


def low_tail(values: list[float], pct: float = 1.0) -> float | None:
    return float(np.percentile(values, pct)) if values else None


def high_tail(values: list[float], pct: float = 99.0) -> float | None:
    return float(np.percentile(values, pct)) if values else None


@dataclass
class LevelResult:
    concurrency: int
    streams: int = 0
    turns: int = 0
    unanswered: int = 0
    p99_ratio: float | None = None  # the ratio 99 % of streams meet (1st percentile)
    p50_ratio: float | None = None
    first_audio_p50_ms: float | None = None
    first_audio_p99_ms: float | None = None
    lateness_p99_ms: float | None = None
    lateness_max_ms: float | None = None
    stage_tails: dict[str, float | None] = field(default_factory=dict)  # server-side window tails
    stage_medians: dict[str, float | None] = field(default_factory=dict)  # server-side window p50s (phone)
    breaches: list[str] = field(default_factory=list)
    reasons: list[str] = field(default_factory=list)
    passed: bool = False
    turn_details: list[dict] = field(default_factory=list)  # every judged turn, for the record
    # Through the phone transport (``cadence capacity --transport phone``):
    transport: str = "inprocess"
    first_audio_p95_ms: float | None = None
    answered_once: int = 0  # turns with exactly one bot reply
    answered_more: int = 0  # turns the bot answered more than once
    server_ratio_p1: float | None = None  # the server's output_rt_ratio window p1 (producer headroom)
    gpu_memory_gib: dict[str, float] = field(default_factory=dict)  # stage -> measured GiB (from /metrics)
    caller_late_ticks: int = 0  # 20 ms sending slots the callers' own process missed
    cpu_cores: dict[str, float] = field(default_factory=dict)  # the hold's server CPU per process group (phone)
    # the hold's server counters (phone): LLM requests, turns, replies, speculations started / confirmed / withdrawn
    counts: dict[str, float] = field(default_factory=dict)
    worker_calls: list[int] = field(default_factory=list)  # live calls per worker at the hold's end (--workers N)
    turn_waves: dict[str, float] = field(default_factory=dict)  # the turns' burstiness (agent.capacity.waves)
    # (phone) the answered turns the server ended on the turn model's silence fallback, named in the reply's marks,
    # and the first audio over the other answered turns; None where no reply named its turn's end (older servers)
    fallback_turns: int = 0
    first_audio_no_fallback_p50_ms: float | None = None
    first_audio_no_fallback_p95_ms: float | None = None
    first_audio_no_fallback_p99_ms: float | None = None


def judge_level(concurrency: int, records: list[CallRecord], steady_from: float, until: float,
                min_ratio: float, breaches: list[str]) -> LevelResult:
    """The caller-side figures over steady-state turns, and pass/fail with reasons."""
    result = LevelResult(concurrency, breaches=list(breaches))
    ratios: list[float] = []
    firsts: list[float] = []
    late: list[float] = []
    for record in records:
        turns = [t for t in turn_deliveries(record) if steady_from <= t.eos <= until]
        if not turns:
            continue
        result.turns += len(turns)
        result.unanswered += sum(not t.answered for t in turns)
        firsts += [t.first_audio_ms for t in turns if t.first_audio_ms is not None]
        for t in turns:
            late.extend(t.lateness_ms)
            result.turn_details.append({
                "caller": t.caller, "at_s": round(t.eos - steady_from, 2), "answered": t.answered,
                "first_audio_ms": t.first_audio_ms, "ratio": t.ratio, "audio_s": round(t.audio_s, 2),
                "max_lateness_ms": max(t.lateness_ms, default=0.0),
            })
        ratio = stream_ratio(turns)
        if ratio is not None:
            ratios.append(ratio)
    result.streams = len(ratios)
    result.p99_ratio = low_tail(ratios, 1.0)
    result.p50_ratio = low_tail(ratios, 50.0)
    result.first_audio_p50_ms = low_tail(firsts, 50.0)
    result.first_audio_p99_ms = high_tail(firsts, 99.0)
    result.lateness_p99_ms = high_tail(late, 99.0)
    result.lateness_max_ms = max(late) if late else None
    if result.streams < concurrency:
        result.reasons.append(f"only {result.streams} of {concurrency} streams had a judged reply in the "
                              "steady state (hold longer)")
    if result.p99_ratio is None or result.p99_ratio < min_ratio:
        shown = "none" if result.p99_ratio is None else f"{result.p99_ratio:.2f}x"
        result.reasons.append(f"p99 delivery {shown} < {min_ratio:.2f}x")
    if result.unanswered:
        result.reasons.append(f"{result.unanswered} turn(s) unanswered")
    result.reasons.extend(breaches)
    result.passed = not result.reasons
    return result


def knee(levels: list[LevelResult]) -> int:
    """The largest concurrency that passed with every smaller tested level passing too."""
    best = 0
    for level in sorted(levels, key=lambda r: r.concurrency):
        if not level.passed:
            break
        best = level.concurrency
    return best


def next_level(levels: list[LevelResult], ramp: list[int], refine: bool) -> int | None:
    """The next concurrency to try: up the ramp until a failure, then bisect the gap."""
    tried = {r.concurrency for r in levels}
    failed = sorted(r.concurrency for r in levels if not r.passed)
    if not failed:
        return next((n for n in ramp if n not in tried), None)
    if not refine:
        return None
    good = knee(levels)
    bad = failed[0]
    if bad - good <= 1:
        return None
    mid = (good + bad) // 2
    return mid if mid not in tried else None
