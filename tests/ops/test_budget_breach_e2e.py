"""A deliberately slowed stage shows up as budget breaches (and in the gate), through the real pipeline.

The TTS engine is the real Piper voice behind a wrapper that waits before each synthesis.
Against a baseline run of the same caller, only ``tts_first_audio`` goes out of budget, the
breach is counted and judged, and while a caller is talking the gate refuses the next one,
naming the stage.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Iterator

from agent.capacity.analysis import turn_deliveries
from agent.capacity.caller import call
from tests.ops.helpers import gate_admit, make_server, params

DELAY_S = 3.0
BUDGETS = {  # generous everywhere except the TTS stage under test
    "asr_final_p99_ms": 20000.0,
    "llm_first_token_p99_ms": 20000.0,
    "tts_first_audio_p99_ms": 2000.0,
    "first_audio_p99_ms": 60000.0,
    "output_chunk_lateness_ms": 60000.0,
    "output_rt_ratio_min": 0.0,
    "min_samples": 1,
}


class SlowTTS:
    """A real engine, slowed: the first synthesis of each reply starts ``delay_s`` late."""

    def __init__(self, inner, delay_s: float):
        self.inner, self.delay_s = inner, delay_s
        self.name, self.sample_rate = f"slow-{inner.name}", inner.sample_rate
        self._last = 0.0

    def synthesize(self, text: str) -> Iterator[bytes]:
        if time.monotonic() - self._last > 2.0:  # a new reply, not the next clause of this one
            time.sleep(self.delay_s)  # runs on the TTS service's worker thread
        yield from self.inner.synthesize(text)
        self._last = time.monotonic()


async def _talk(server, utterance, watch_gate: bool = False) -> tuple[list, list[str]]:
    reasons: list[str] = []

    async def watch() -> None:
        while True:
            ok, why = server.gate.ready()
            if not ok and server.gate.active:
                reasons.append(why)
            await asyncio.sleep(0.1)

    watcher = asyncio.create_task(watch()) if watch_gate else None
    try:
        record = await call(server.run_caller, params(server), 0, [utterance], stop_at=time.monotonic() + 1.0,
                            max_wait_s=25.0, admit=gate_admit(server), leave=server.gate.release)
    finally:
        if watcher is not None:
            watcher.cancel()
    return turn_deliveries(record), reasons


async def test_slowed_tts_breaches_its_budget_and_closes_the_gate(embedded, corpus):
    base, base_metrics = make_server(embedded, budgets=BUDGETS)
    turns, _ = await _talk(base, corpus[1])
    assert turns and turns[0].answered
    base_metrics.budgets.evaluate()
    assert base_metrics.budgets.states["tts_first_audio"].breach_samples == 0
    h = base_metrics.stages.histograms
    for stage in ("asr_final", "turn_end", "turn_model", "llm_first_token", "tts_first_audio", "first_audio"):
        assert h[stage].count() >= 1 and h[stage].min() > 0.0, stage
    assert h["turn_model"].max() < h["turn_end"].max()  # smart-turn's inference is a part of the turn end
    # The turn ends no sooner than the VAD's 0.2 s stop window, and before the bot speaks.
    assert h["turn_end"].min() >= 150.0 and h["turn_end"].max() <= h["first_audio"].max()
    # End of speech -> first audio covers ASR, the LLM's first token and TTS's first audio.
    assert h["first_audio"].max() >= h["asr_final"].min() + h["llm_first_token"].min() + h["tts_first_audio"].min() - 50
    assert h["output_chunk_lateness"].count() > 10

    slow_engines = dataclasses.replace(embedded.engines, tts_engine=SlowTTS(embedded.engines.tts_engine, DELAY_S))
    slow, metrics = make_server(embedded, engines=slow_engines, budgets=BUDGETS)
    turns, gate_reasons = await _talk(slow, corpus[1], watch_gate=True)
    assert turns and turns[0].answered

    states = {s.stage.name for s in metrics.budgets.evaluate()}
    assert states == {"tts_first_audio"}, states
    tts = metrics.budgets.states["tts_first_audio"]
    assert tts.breach_samples >= 1 and tts.tail >= DELAY_S * 1000.0
    assert all(metrics.budgets.states[s].breach_samples == 0 for s in ("asr_final", "llm_first_token"))
    assert any("tts_first_audio p99" in r for r in gate_reasons), gate_reasons
