"""The stages Cadence times, and one sliding histogram per stage shared by every session.

Per turn: end of speech -> final transcript (``asr_final``), end of speech -> end of the user turn
(``turn_end``: the VAD's stop window plus the turn detector's wait), transcript -> LLM first token
(``llm_first_token``), LLM first token -> first clause handed to TTS (``first_clause``: the reply's
first words arriving), first clause handed to TTS -> its first audio (``tts_first_audio``), TTS first audio ->
the output transport starting it (``audio_out``), end of speech -> first audio out (``first_audio``). Per chunk: TTS inter-arrival and output
lateness against real-time playback. Per reply: the stream's delivery ratio (x real time).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from agent.metrics.histogram import SlidingHistogram


@dataclass(frozen=True)
class Stage:
    name: str
    help: str
    unit: str = "ms"  # "ms" or "x" (ratio to real time)
    # ``BudgetsConfig`` field holding this stage's budget; None: measured, not budgeted.
    budget_field: str | None = None
    # For a ratio the bad tail is the low one: the budget bounds the 1st percentile from below.
    higher_is_better: bool = False


STAGES: tuple[Stage, ...] = (
    Stage("asr_final", "end of speech -> final transcript", budget_field="asr_final_p99_ms"),
    Stage("turn_end", "end of speech -> end of the user turn (VAD stop window + turn detector)"),
    Stage("turn_model", "smart-turn: one end-of-turn inference (on the session process's CPU)"),
    # From when the LLM can be asked: the final transcript or the end of the user turn, whichever is later. Up to
    # runs 66-68 (2026-12-05) it ran from the transcript, so it held the turn detector's wait too: their p95-p99 of
    # 735-786 ms at 64-256 callers alike match smart-turn's 0.8 s silence fallback (turn end p99 ~1,000 ms after
    # the end of speech, the transcript ~250 ms), not the LLM.
    Stage("llm_first_token", "final transcript or end of turn, whichever is later -> LLM first token",
          budget_field="llm_first_token_p99_ms"),
    # The reply's first clause arriving token by token (tts.*first_clause_words) and the output path after TTS:
    # with the stages above they add up to first_audio, so no part of it goes unmeasured (run 71 at 64 callers:
    # 247 + 55 + 199 ms of medians against first_audio's 716).
    Stage("first_clause", "LLM first token -> first clause handed to TTS"),
    Stage("tts_first_audio", "first clause to TTS -> TTS first audio", budget_field="tts_first_audio_p99_ms"),
    Stage("audio_out", "TTS first audio -> the output transport starts it (first audio out)"),
    Stage("first_audio", "end of speech -> first audio out", budget_field="first_audio_p99_ms"),
    Stage("tts_chunk_interarrival", "time between TTS audio chunks"),
    Stage("output_chunk_lateness", "output chunk arrival after real-time playback needed it",
          budget_field="output_chunk_lateness_ms"),
    Stage("output_rt_ratio", "per reply: delivered audio seconds per wall second", unit="x",
          budget_field="output_rt_ratio_min", higher_is_better=True),
    Stage("phone_pacer_lateness", "phone: how late the pacer sent a 20 ms media message"),
    Stage("phone_underrun_gap", "phone: silence the caller heard inside a reply"),
    Stage("barge_in_clear", "phone: caller speech onset -> clear sent"),
    Stage("phone_input_lag", "phone: caller audio's arrival -> the VAD analyzed it (every 5th frame)"),
    Stage("event_loop_lag", "event loop: how late a 50 ms timer fires"),
    Stage("gc_pause", "garbage collector pause"),
)
STAGE_BY_NAME = {s.name: s for s in STAGES}


class TurnTimes(Protocol):
    """What ``agent.turn_observer.TurnTiming`` provides (absolute monotonic seconds)."""

    transcript: float | None
    turn_end: float | None
    llm_first_token: float | None
    tts_start: float | None
    tts_first_audio: float | None
    first_audio_out: float | None

    @property
    def end_of_speech(self) -> float | None: ...


def llm_asked(transcript: float | None, turn_end: float | None) -> float | None:
    """When the LLM stage's clock starts: the final transcript, or the end of the user turn when that came later
    (the reply is asked for at the turn's end; the wait before it is the turn detector's, ``turn_end``)."""
    if transcript is None or turn_end is None:
        return transcript
    return max(transcript, turn_end)


def turn_stages_ms(t: TurnTimes, end_of_speech: float | None = None) -> dict[str, float]:
    """The per-turn stage latencies of one turn, in ms (stages that never happened are absent)."""
    eos = t.end_of_speech if end_of_speech is None else end_of_speech
    tts_from = t.tts_start if t.tts_start is not None else t.llm_first_token
    pairs = (
        ("asr_final", eos, t.transcript),
        ("llm_first_token", llm_asked(t.transcript, t.turn_end), t.llm_first_token),
        ("first_clause", t.llm_first_token, t.tts_start),
        ("tts_first_audio", tts_from, t.tts_first_audio),
        ("audio_out", t.tts_first_audio, t.first_audio_out),
        ("first_audio", eos, t.first_audio_out),
    )
    return {name: (b - a) * 1000.0 for name, a, b in pairs if a is not None and b is not None}


Listener = Callable[[str, float, float], None]


class StageMetrics:
    """One ``SlidingHistogram`` per stage; listeners (budgets) see every sample."""

    def __init__(self, window_s: float = 60.0, slices: int = 6, clock: Callable[[], float] = time.monotonic):
        self.clock = clock
        self.window_s = window_s
        self.histograms: dict[str, SlidingHistogram] = {
            s.name: SlidingHistogram(window_s, slices, clock=clock) for s in STAGES
        }
        self.turns_total = 0
        self.replies_total = 0
        self._listeners: list[Listener] = []

    def add_listener(self, listener: Listener) -> None:
        self._listeners.append(listener)

    def record(self, stage: str, value: float, now: float | None = None) -> None:
        now = self.clock() if now is None else now
        self.histograms[stage].record(value, now)
        for listener in self._listeners:
            listener(stage, value, now)

    def record_turn(self, timing: TurnTimes, end_of_speech: float | None = None) -> dict[str, float]:
        stages = turn_stages_ms(timing, end_of_speech)
        now = self.clock()
        for name, value in stages.items():
            self.record(name, value, now)
        self.turns_total += 1
        return stages

    def clear(self) -> None:
        """Start every window afresh (the capacity tool does this when a level's hold begins)."""
        for h in self.histograms.values():
            h.clear()

    def snapshot(self) -> dict[str, dict[str, float | None]]:
        now = self.clock()
        return {name: h.snapshot(now) for name, h in self.histograms.items()}
