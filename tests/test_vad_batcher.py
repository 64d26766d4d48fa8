"""The batched Silero VAD decides exactly as pipecat's stock analyzer for every caller, while the
windows of concurrent callers really share ONNX runs, and a caller that vanishes mid-window costs
the others nothing."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
from pipecat.audio.vad.silero import SileroVADAnalyzer
from pipecat.audio.vad.vad_analyzer import VADParams, VADState

from agent.shared_models import silero_session
from agent.vad_batcher import BatchedSileroVADAnalyzer, SileroBatcher
from testkit.phone_prompts import pcm8k, to_16k

PROMPTS = ["agent-pass", "vm-options", "auth-thankyou", "conf-onlyperson"]
PARAMS = VADParams(confidence=0.6, start_secs=0.1, stop_secs=0.2, min_volume=0.3)


def caller_audio(i: int, rate: int) -> bytes:
    """Caller i: a lead of i x 70 ms of silence (so windows interleave), a prompt, 0.6 s of silence."""
    pcm = pcm8k(PROMPTS[i % len(PROMPTS)])
    if rate == 16000:
        pcm = to_16k(pcm)
    lead = np.zeros(int(rate * 0.07 * i), "<i2").tobytes()
    tail = np.zeros(int(rate * 0.6), "<i2").tobytes()
    return lead + pcm + tail


def chunks(pcm: bytes, rate: int) -> list[bytes]:
    step = rate // 50 * 2  # 20 ms, as a transport delivers it
    return [pcm[i:i + step] for i in range(0, len(pcm), step)]


async def states(analyzer, pcm: bytes, rate: int) -> list[VADState]:
    analyzer.set_sample_rate(rate)
    out = []
    for chunk in chunks(pcm, rate):
        out.append(await analyzer.analyze_audio(chunk))
        await asyncio.sleep(0)  # callers interleave as live ones do
    return out


@pytest.mark.parametrize("rate", [8000, 16000])
def test_batched_vad_decides_as_stock_for_every_caller(rate: int) -> None:
    callers = 12
    audio = [caller_audio(i, rate) for i in range(callers)]

    async def stock_run() -> list[list[VADState]]:
        return [await states(SileroVADAnalyzer(params=PARAMS), pcm, rate) for pcm in audio]

    async def batched_run() -> tuple[list[list[VADState]], SileroBatcher]:
        batcher = SileroBatcher(silero_session())
        analyzers = [BatchedSileroVADAnalyzer(params=PARAMS, batcher=batcher) for _ in audio]
        got = await asyncio.gather(*(states(a, pcm, rate) for a, pcm in zip(analyzers, audio, strict=True)))
        batcher.close()
        return list(got), batcher

    expected = asyncio.run(stock_run())
    got, batcher = asyncio.run(batched_run())
    for i in range(callers):
        assert got[i] == expected[i], f"caller {i} at {rate} Hz"
        assert VADState.SPEAKING in got[i] and got[i][-1] == VADState.QUIET  # the prompt was heard and ended
    window = 256 if rate == 8000 else 512
    assert batcher.stats.windows == sum(len(pcm) // 2 // window for pcm in audio)
    # the callers' windows shared runs: far fewer runs than windows, and batches of most callers
    assert batcher.stats.runs < batcher.stats.windows / 4
    assert batcher.stats.max_batch >= callers // 2
    print(f"\n{rate} Hz: {batcher.stats.windows} windows in {batcher.stats.runs} runs "
          f"(mean batch {batcher.stats.mean_batch:.1f}, max {batcher.stats.max_batch})")


def test_a_vanished_caller_costs_the_others_nothing() -> None:
    rate = 16000
    audio = [caller_audio(i, rate) for i in range(4)]

    async def run() -> tuple[list[list[VADState]], list[VADState]]:
        batcher = SileroBatcher(silero_session())
        analyzers = [BatchedSileroVADAnalyzer(params=PARAMS, batcher=batcher) for _ in audio]
        tasks = [asyncio.create_task(states(a, pcm, rate)) for a, pcm in zip(analyzers, audio, strict=True)]
        await asyncio.sleep(0.05)
        tasks[0].cancel()  # the caller hung up while its window was waiting
        rest = await asyncio.gather(*tasks[1:])
        alone = await states(SileroVADAnalyzer(params=PARAMS), audio[1], rate)
        batcher.close()
        return list(rest), alone

    rest, alone = asyncio.run(run())
    assert rest[0] == alone
    assert all(VADState.SPEAKING in s for s in rest)
