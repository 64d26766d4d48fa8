"""``cadence capacity --transport phone``: levels of synthetic phone callers against a running server.

For a level of N callers: they connect over ``/phone/ws`` staggered across the warm-up, talk and
listen in real time until ``warmup_s + hold_s`` (finishing the turn in flight), and only turns whose
end of speech falls inside the hold are judged. The server's stage windows are reset when the hold
begins (``POST /metrics/reset``) and read once every caller has finished its last turn (``GET
/metrics``): per-stage tails, the server-side delivery ratio, budget breaches and GPU memory per stage.

Judged per turn, from the caller's side: first audible bot audio after the frame holding the
prompt's last voiced sample was sent; how many bot replies came (Cadence names each reply's marks
``r<index>-...``: distinct indices between this prompt's end and the next prompt's start); and the
reply as the caller's player hears it (chunk lateness: how long the player would have run dry). A reply's marks
also name what ended the turn it answers (``r<index>-<by>-...``, ``transports/phone/marks.py``): the first audio
is given over every turn and over the turns the turn model did not hold for its silence fallback, which is what
``budgets.first_audio_excludes_fallback`` judges.
The caller-side delivery ratio (received audio seconds per wall second) is reported, but a paced
phone line delivers at real time by design (about 1.0x plus the 80 ms lead), so the 1.2x headroom
rule is judged on the server's ``output_rt_ratio`` (TTS audio reaching the transport) instead.
"""

from __future__ import annotations

import asyncio
import gzip
import json
import random
import re
import time
from bisect import bisect_left
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
from loguru import logger

from agent.capacity.analysis import LevelResult, knee, next_level
from agent.capacity.phone_caller import PhoneCallRecord, Prompt, Ticker, phone_call
from agent.capacity.server_cpu import ServerCpu
from agent.capacity.waves import turn_waves
from agent.config import BudgetsConfig
from agent.metrics.delivery import PlayoutTracker

REPLY_MARK = re.compile(r"^r(\d+)-")
REPLY_TURN_END = re.compile(r"^r(\d+)-([a-z_]+)-\d")  # a reply's mark naming what ended its turn
FALLBACK = "silence"  # agent.turn_ends: the turn model judged the turn unfinished; its silence fallback ended it
GIB = 1024**3


@dataclass
class PhoneRampOptions:
    url: str = "http://127.0.0.1:7860"
    ramp: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64)
    warmup_s: float = 10.0
    hold_s: float = 45.0
    # Callers connect at uniform random times over this many seconds (0: 0.6 x warmup_s). Over about one turn
    # cycle (a prompt and its ~7.5 s reply, ~11 s) their turns arrive evenly instead of in waves: runs 82-87
    # at 256 callers saw waves of 58-144 turns 4-8 s apart, and first audio p50 413-1,353 ms from wave to wave.
    connect_s: float = 0.0
    # A caller speaks its next prompt this long after the bot's reply ends, plus a uniform draw of up to
    # pause_jitter_s per turn (0: always pause_s, as every run up to run 98). A fixed pause keeps callers' turn
    # cycles in step: runs 95-97 still saw waves ~12 s apart after the connect spread.
    pause_s: float = 0.6
    pause_jitter_s: float = 0.0
    max_wait_s: float = 15.0
    refine: bool = True
    all_levels: bool = False  # run every level of the ramp, past failures too
    seed: int = 1
    # Where /metrics, /metrics/reset, /health and /ready are read; empty: ``url``. With
    # ``cadence serve --workers N`` it is the parent's summing listener (server.metrics_listen).
    metrics_url: str = ""
    # Where each level's caller timelines go (records-<N>.json.gz: every chunk, mark, clear and prompt time of
    # every caller, with the hold's bounds); empty: not written. A failed level is then read turn by turn.
    records_dir: str = ""

    @property
    def scrape_url(self) -> str:
        return (self.metrics_url or self.url).rstrip("/")

    @property
    def ws_url(self) -> str:
        return self.url.rstrip("/").replace("http://", "ws://").replace("https://", "wss://") + "/phone/ws"


@dataclass(frozen=True)
class PhoneTurn:
    caller: int
    eos: float
    first_audio_ms: float | None
    replies: int
    audio_s: float
    wall_s: float  # first chunk arrival -> end of the last chunk's playout
    lateness_ms: tuple[float, ...]
    prompt: str = ""  # the recorded prompt the caller spoke (bench/first_audio_by_prompt.py groups by it)
    ended_by: str = ""  # what ended the turn, as its reply's marks name it ("": not named)


def chunk_replies(chunks: list[tuple[float, float, bool]], marks: list[tuple[float, str]],
                  clears: Sequence[float] = ()) -> list[str | None]:
    """The reply each chunk belongs to. Cadence sends a reply's marks after its audio on the same socket, so a
    chunk is part of the reply named by the first mark that arrives at or after it, unless a ``clear`` comes
    first: the reply was cut before its next mark, and the chunk is the cut reply's (the one its last mark
    before the chunk named, or, with no such mark since the previous clear or end mark, a reply of its own,
    ``cut<k>``). None: no mark and no clear after it (the call ended)."""
    named = [(at, m.group(1), name.endswith("-end")) for at, name in marks if (m := REPLY_MARK.match(name))]
    times = [at for at, _, _ in named]
    cuts = sorted(clears)
    out: list[str | None] = []
    for at, _, _ in chunks:
        k = bisect_left(times, at)
        c = bisect_left(cuts, at)
        next_clear = cuts[c] if c < len(cuts) else float("inf")
        if k < len(named) and named[k][0] <= next_clear:
            out.append(named[k][1])
        elif c == len(cuts):
            out.append(None)
        else:  # cut by clear c before the reply's next mark
            prev_clear = cuts[c - 1] if c > 0 else float("-inf")
            before = named[k - 1] if k > 0 else None
            if before is not None and not before[2] and before[0] > prev_clear:
                out.append(before[1])
            else:
                out.append(f"cut{c}")
    return out


def phone_turns(record: PhoneCallRecord) -> list[PhoneTurn]:
    """Each spoken prompt's answer, as the caller saw it: the chunks up to the next prompt's start, less the
    rest of a reply that began before this prompt ended (a reply that stalled for longer than the caller's
    pause, so the caller spoke again, and then went on: it answers an earlier prompt, not this one)."""
    chunks = sorted(record.chunks)
    marks = sorted(record.marks)
    replies_of = chunk_replies(chunks, marks, record.clears)
    began: dict[str, float] = {}  # each named reply's first chunk
    for (at, _, _), r in zip(chunks, replies_of, strict=True):
        if r is not None:
            began.setdefault(r, at)  # chunks are sorted: the first seen is the first to arrive
    out = []
    for i, eos in enumerate(record.speech_ends):
        nxt = record.speech_starts[i + 1] if i + 1 < len(record.speech_starts) else float("inf")
        earlier = {r for r, at in began.items() if at < eos}
        mine = [c for c, r in zip(chunks, replies_of, strict=True) if eos <= c[0] < nxt and r not in earlier]
        first = next((at for at, _, loud in mine if loud), None)
        ids = {m.group(1) for at, name in marks
               if eos <= at < nxt and (m := REPLY_MARK.match(name)) and m.group(1) not in earlier}
        tracker = PlayoutTracker()
        late = [tracker.chunk(at, sec) * 1000.0 for at, sec, _ in mine]
        audio = sum(sec for _, sec, _ in mine)
        wall = (mine[-1][0] + mine[-1][1] - mine[0][0]) if mine else 0.0
        replies = len(ids) if ids else (1 if first is not None else 0)
        ended_by = next((m.group(2) for at, name in marks
                         if eos <= at < nxt and (m := REPLY_TURN_END.match(name)) and m.group(1) in ids), "")
        out.append(PhoneTurn(record.caller, eos, None if first is None else (first - eos) * 1000.0, replies,
                             audio, wall, tuple(late[1:]),
                             record.utterances[i] if i < len(record.utterances) else "", ended_by))
    return out


def _pct(values: list[float], q: float) -> float | None:
    return float(np.percentile(values, q)) if values else None


def judge_phone_level(concurrency: int, records: list[PhoneCallRecord], steady_from: float, until: float,
                      budgets: BudgetsConfig, scrape: dict | None) -> LevelResult:
    """The caller-side figures over the hold's turns, the server's tails, and pass/fail with reasons."""
    result = LevelResult(concurrency, transport="phone")
    ratios: list[float] = []
    firsts: list[float] = []
    rest: list[float] = []  # the answered turns not ended by the turn model's silence fallback
    named = 0  # answered turns whose reply named their end
    late: list[float] = []
    for record in records:
        turns = [t for t in phone_turns(record) if steady_from <= t.eos <= until]
        if not turns:
            continue
        result.turns += len(turns)
        result.unanswered += sum(t.first_audio_ms is None for t in turns)
        result.answered_once += sum(t.replies == 1 and t.first_audio_ms is not None for t in turns)
        result.answered_more += sum(t.replies > 1 for t in turns)
        answered = [t for t in turns if t.first_audio_ms is not None]
        firsts += [t.first_audio_ms for t in answered]
        rest += [t.first_audio_ms for t in answered if t.ended_by != FALLBACK]
        named += sum(bool(t.ended_by) for t in answered)
        result.fallback_turns += sum(t.ended_by == FALLBACK for t in answered)
        for t in turns:
            late.extend(t.lateness_ms)
            result.turn_details.append({
                "caller": t.caller, "prompt": t.prompt, "at_s": round(t.eos - steady_from, 2),
                "answered": t.first_audio_ms is not None,
                "replies": t.replies, "first_audio_ms": t.first_audio_ms, "audio_s": round(t.audio_s, 2),
                "ended_by": t.ended_by,
                "max_lateness_ms": max(t.lateness_ms, default=0.0)})
        if any(t.first_audio_ms is None for t in turns):
            ratios.append(0.0)
        else:
            wall = sum(t.wall_s for t in turns)
            if wall > 0:
                ratios.append(sum(t.audio_s for t in turns) / wall)
        result.caller_late_ticks += record.late_sends
    result.streams = len(ratios)
    result.turn_waves = turn_waves(result.turn_details)
    result.p99_ratio, result.p50_ratio = _pct(ratios, 1.0), _pct(ratios, 50.0)
    result.first_audio_p50_ms, result.first_audio_p95_ms = _pct(firsts, 50.0), _pct(firsts, 95.0)
    result.first_audio_p99_ms = _pct(firsts, 99.0)
    if named:
        result.first_audio_no_fallback_p50_ms, result.first_audio_no_fallback_p95_ms = _pct(rest, 50.0), _pct(rest, 95.0)
        result.first_audio_no_fallback_p99_ms = _pct(rest, 99.0)
    result.lateness_p99_ms, result.lateness_max_ms = _pct(late, 99.0), (max(late) if late else None)
    if scrape is not None:
        result.stage_tails = scrape["tails"]
        result.stage_medians = scrape.get("medians", {})
        result.server_ratio_p1 = scrape["tails"].get("output_rt_ratio")
        result.gpu_memory_gib = scrape["gpu_memory_gib"]
        result.breaches = list(scrape["breaches"])
    reasons = result.reasons
    failed = [r.refused for r in records if r.refused]
    if failed:
        reasons.append(f"{len(failed)} caller(s) failed: {failed[0]}")
    if result.streams < concurrency:
        reasons.append(f"only {result.streams} of {concurrency} callers had a judged turn in the hold (hold longer)")
    if result.unanswered:
        reasons.append(f"{result.unanswered} turn(s) unanswered")
    if result.answered_more:
        reasons.append(f"{result.answered_more} turn(s) answered more than once")
    judged, which = result.first_audio_p99_ms, ""
    if budgets.first_audio_excludes_fallback:
        if not named and firsts:
            reasons.append("no reply named its turn's end (a server before the turn-end marks?): "
                           "budgets.first_audio_excludes_fallback cannot be judged")
        judged, which = result.first_audio_no_fallback_p99_ms, " (the turns not held for the silence fallback)"
    if judged is not None and judged > budgets.first_audio_p99_ms:
        reasons.append(f"first audio p99{which} {judged:.0f} ms > {budgets.first_audio_p99_ms:.0f} ms")
    if result.lateness_p99_ms is not None and result.lateness_p99_ms > budgets.output_chunk_lateness_ms:
        reasons.append(f"caller chunk lateness p99 {result.lateness_p99_ms:.0f} ms > "
                       f"{budgets.output_chunk_lateness_ms:.0f} ms (the caller's player ran dry)")
    if scrape is None:
        reasons.append("no /metrics scrape from the server")
    elif result.server_ratio_p1 is not None and result.server_ratio_p1 < budgets.output_rt_ratio_min:
        # (None: every reply reached the transport in one burst, nothing to pace)
        reasons.append(f"server delivery p1 {result.server_ratio_p1:.2f}x < {budgets.output_rt_ratio_min:.2f}x")
    reasons.extend(b for b in result.breaches if not b.startswith(("output_rt_ratio", "first_audio")))
    result.passed = not reasons
    return result


def parse_scrape(text: str) -> dict:
    """Stage tails (p99; p1 for a ratio), stages in breach, and GPU memory per stage from ``/metrics``."""
    from prometheus_client.parser import text_string_to_metric_families

    from agent.metrics.scrape import parse_metrics

    scrape = parse_metrics(text)
    tails: dict[str, float | None] = {}
    medians: dict[str, float | None] = {}
    breaches = []
    for name, row in scrape.rows.items():
        q = row.quantiles or {}
        tails[name] = q.get(0.01) if row.unit == "x" else q.get(0.99)
        medians[name] = q.get(0.5)
        if row.in_breach:
            tail = tails[name]
            shown = "-" if tail is None else f"{tail:.4g}"
            breaches.append(f"{name} {'p1' if row.unit == 'x' else 'p99'} {shown} out of budget {row.budget:g}")
    memory: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "cadence_gpu_memory_measured_bytes":
                memory[sample.labels["stage"]] = round(sample.value / GIB, 3)
            elif sample.name == "cadence_gpu_memory_share_bytes":
                memory[sample.labels["stage"] + "_share"] = round(sample.value / GIB, 3)
    return {"tails": tails, "medians": medians, "breaches": breaches, "gpu_memory_gib": memory,
            "event_loop_lag_p99_ms": tails.get("event_loop_lag")}


COUNTED = {"cadence_llm_requests_total": "llm_requests", "cadence_turns_total": "turns",
           "cadence_replies_total": "replies", "cadence_speculations_started_total": "speculations",
           "cadence_speculations_confirmed_total": "confirmed", "cadence_speculations_withdrawn_total": "withdrawn"}


# counters kept per label: ends_model, ends_silence, ...; withdrawn_resumed, withdrawn_newer_partial, ...
BY_LABEL = {"cadence_turn_ends_total": ("ends", "by"), "cadence_speculations_withdrawn_total": ("withdrawn", "reason"),
            "cadence_llm_replies_dropped_total": ("dropped", "why")}


def server_counts(text: str) -> dict[str, float]:
    """The counters of ``COUNTED`` on a ``/metrics`` page (labels summed), by their short names; those of
    ``BY_LABEL`` one per label value too."""
    from prometheus_client.parser import text_string_to_metric_families

    counts: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            names = [COUNTED.get(sample.name)]
            if sample.name in BY_LABEL:
                prefix, label = BY_LABEL[sample.name]
                names.append(f"{prefix}_{sample.labels.get(label, '')}")
            for short in filter(None, names):
                counts[short] = counts.get(short, 0.0) + sample.value
    return counts


async def worker_calls(http: Any, scrape_url: str) -> list[int]:
    """Live calls per worker of ``cadence serve --workers N`` (the parent's ``/health``, read with the
    ``httpx.AsyncClient`` ``http``); [] for one process."""
    import httpx

    try:
        rows = (await http.get(f"{scrape_url}/health")).json().get("workers") or []
    except (httpx.HTTPError, ValueError, AttributeError):
        return []
    return [int(r.get("sessions") or 0) for r in rows if isinstance(r, dict)]


def connect_delay(rng: random.Random, opts: PhoneRampOptions) -> float:
    """When a caller of a level connects, from the level's start: uniform over ``connect_s`` (0.6 x warm-up)."""
    return rng.uniform(0.0, opts.connect_s or opts.warmup_s * 0.6)


def deal_prompts(corpus: list[Prompt], caller: int, turns: int, callers: int) -> list[Prompt]:
    """Caller ``caller``'s prompts: disjoint across callers while the corpus lasts."""
    return [corpus[(caller + k * callers) % len(corpus)] for k in range(turns)]


async def run_phone_level(corpus: list[Prompt], n: int, opts: PhoneRampOptions, budgets: BudgetsConfig
                          ) -> tuple[LevelResult, list[PhoneCallRecord], tuple[float, float]]:
    import httpx

    rng = random.Random(opts.seed * 1000 + n)
    t0 = time.monotonic()
    steady_from = t0 + opts.warmup_s
    stop_at = steady_from + opts.hold_s
    turns = max(4, int((opts.warmup_s + opts.hold_s) / 3.0) + 2)
    ticker, ticking = Ticker(), asyncio.Event()
    ticker_task = asyncio.create_task(ticker.run(ticking))
    scraped: dict | None = None

    async def one(i: int) -> PhoneCallRecord:
        await asyncio.sleep(connect_delay(rng, opts))
        return await phone_call(opts.ws_url, i, deal_prompts(corpus, i, turns, n), ticker, stop_at=stop_at,
                                max_wait_s=opts.max_wait_s, pause_s=opts.pause_s,
                                pause_jitter_s=opts.pause_jitter_s, seed=opts.seed * 1_000_003 + n * 1009 + i)

    cpu: list = []  # [ServerCpu, its sample at the hold's start]
    counts0: dict[str, float] = {}  # the server's counters at the hold's start
    counts1: dict[str, float] = {}

    async def reset_at_hold(http: httpx.AsyncClient) -> bool:
        await asyncio.sleep(max(0.0, steady_from - time.monotonic()))
        try:
            (await http.post(f"{opts.scrape_url}/metrics/reset")).raise_for_status()
        except httpx.HTTPError as exc:
            logger.warning(f"capacity: cannot reset the server's metrics ({exc})")
            return False
        try:
            meter = ServerCpu.from_health((await http.get(f"{opts.scrape_url}/health")).json())
            if meter is not None:  # (psutil reads /proc off the callers' loop: their 20 ms ticks keep time)
                cpu.extend((meter, await asyncio.to_thread(meter.sample)))
        except (httpx.HTTPError, ValueError) as exc:
            logger.warning(f"capacity: no server CPU figures ({exc})")
        try:
            counts0.update(server_counts((await http.get(f"{opts.scrape_url}/metrics")).text))
        except (httpx.HTTPError, ValueError) as exc:
            logger.warning(f"capacity: no server counters at the hold's start ({exc})")
        return True

    async def cpu_until_hold_end() -> dict[str, float]:
        if not cpu:
            return {}
        meter, start = cpu
        return ServerCpu.cores(start, await asyncio.to_thread(meter.sample))

    async with httpx.AsyncClient(timeout=30.0) as http:
        reset = asyncio.create_task(reset_at_hold(http))
        hold_end = asyncio.create_task(asyncio.sleep(max(0.0, stop_at - time.monotonic())))
        calls = asyncio.gather(*(one(i) for i in range(n)))
        await hold_end  # the CPU is read over the hold itself: no connecting, no hang-ups
        await reset
        cores = await cpu_until_hold_end()
        per_worker = await worker_calls(http, opts.scrape_url)
        records = await calls
        # Read once every caller is done: the windows then hold every turn spoken in the hold, answers
        # included (callers start no turn after the hold, they only finish the one in flight).
        if await reset:
            try:
                r = await http.get(f"{opts.scrape_url}/metrics")
                r.raise_for_status()
                scraped = parse_scrape(r.text)
                counts1 = server_counts(r.text)
            except httpx.HTTPError as exc:
                logger.warning(f"capacity: cannot read the server's metrics ({exc})")
    ticking.set()
    await ticker_task
    result = judge_phone_level(n, list(records), steady_from, stop_at, budgets, scraped)
    result.cpu_cores = cores
    result.worker_calls = per_worker
    if counts0 and scraped is not None:  # from the hold's start to every caller's end
        result.counts = {k: v - counts0.get(k, 0.0) for k, v in counts1.items()}
    if ticker.late_ticks:
        logger.info(f"capacity: the callers' ticker missed {ticker.late_ticks}/{ticker.ticks} slots "
                    f"(max lag {ticker.max_lag_s * 1000:.0f} ms)")
    return result, list(records), (steady_from, stop_at)


def write_records(path: Path, records: list[PhoneCallRecord], hold: tuple[float, float]) -> None:
    """Every caller's timeline of one level and the judged window (``hold``: its start and end), gzipped JSON:
    ``{"hold": [start, end], "callers": [record, ...]}`` (``json.load(gzip.open(path))``)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(path, "wt") as f:
        json.dump({"hold": list(hold), "callers": [asdict(r) for r in records]}, f)


PRINTED_STAGES = ("phone_input_lag", "asr_final", "turn_end", "turn_model", "llm_first_token", "first_clause",
                  "tts_first_audio", "audio_out")  # the per-turn server tails


def describe_phone(level: LevelResult) -> str:
    def f(v: float | None, unit: str = "") -> str:
        return "-" if v is None else (f"{v:.2f}{unit}" if unit == "x" else f"{v:.0f}{unit}")

    verdict = "PASS" if level.passed else "FAIL: " + "; ".join(level.reasons)
    tails = level.stage_tails
    stages = ", ".join(f"{k} {f(tails.get(k), ' ms')}" for k in PRINTED_STAGES)
    medians = ", ".join(f"{k} {f(level.stage_medians.get(k), ' ms')}" for k in PRINTED_STAGES)
    mem = ", ".join(f"{k} {v:.1f}" for k, v in level.gpu_memory_gib.items() if not k.endswith("_share"))
    return (f"{level.concurrency:3d} phone callers: first audio p50 {f(level.first_audio_p50_ms, ' ms')} "
            f"p95 {f(level.first_audio_p95_ms, ' ms')} p99 {f(level.first_audio_p99_ms, ' ms')}"
            + (f" (without the {level.fallback_turns} turns held for the silence fallback: p50 "
               f"{f(level.first_audio_no_fallback_p50_ms, ' ms')} p95 {f(level.first_audio_no_fallback_p95_ms, ' ms')} "
               f"p99 {f(level.first_audio_no_fallback_p99_ms, ' ms')})"
               if level.first_audio_no_fallback_p50_ms is not None else "")
            + "; "
            f"server p99 {stages}; server p50 {medians}; delivery p1 server {f(level.server_ratio_p1, 'x')} caller "
            f"{f(level.p99_ratio, 'x')}; lateness p99 {f(level.lateness_p99_ms, ' ms')}; "
            f"{level.answered_once}/{level.turns} answered once; event-loop lag p99 {f(tails.get('event_loop_lag'), ' ms')}"
            + (f"; GPU GiB {mem}" if mem else "")
            + (f"; server CPU cores {', '.join(f'{k} {v:.2f}' for k, v in level.cpu_cores.items())}"
               if level.cpu_cores else "")
            + (f"; server counts {', '.join(f'{k} {v:.0f}' for k, v in level.counts.items())}" if level.counts else "")
            + (f"; calls per worker {min(level.worker_calls)}-{max(level.worker_calls)}" if level.worker_calls else "")
            + (f"; turn waves peak/mean {level.turn_waves['peak_to_mean']:.2f}x per {level.turn_waves['bin_s']:.0f} s, "
               f"slowest 5% in peaks {level.turn_waves.get('tail_in_peaks', 0.0):.0%}" if level.turn_waves else "")
            + f" -> {verdict}")


async def find_phone_capacity(corpus: list[Prompt], opts: PhoneRampOptions, budgets: BudgetsConfig,
                              on_level: Callable[[int, list[LevelResult]], None] | None = None
                              ) -> tuple[int, list[LevelResult]]:
    """Every level of the ramp (``all_levels``), or up the ramp until a failure then bisect.
    ``on_level(cap so far, levels so far)`` runs after each level (results survive a cut-short run)."""
    levels: list[LevelResult] = []
    ramp = list(opts.ramp)
    pending = list(ramp) if opts.all_levels else None
    n = pending.pop(0) if pending else next_level(levels, ramp, opts.refine)
    while n is not None:
        logger.info(f"capacity: {n} phone callers for {opts.warmup_s:.0f} + {opts.hold_s:.0f} s")
        level, records, hold = await run_phone_level(corpus, n, opts, budgets)
        if opts.records_dir:
            write_records(Path(opts.records_dir) / f"records-{n}.json.gz", records, hold)
        levels.append(level)
        print(describe_phone(level), flush=True)
        if on_level is not None:
            on_level(knee(levels), sorted(levels, key=lambda r: r.concurrency))
        if pending is not None:
            n = pending.pop(0) if pending else None
        else:
            n = next_level(levels, ramp, opts.refine)
        if n is not None:
            await asyncio.sleep(2.0)  # the last level's sessions end before the next one connects
    return knee(levels), sorted(levels, key=lambda r: r.concurrency)
