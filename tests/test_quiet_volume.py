"""The VAD's quiet gate answers exactly what pipecat's BS.1770 volume measures, and skips the measure only where
that is 0: the bound's gain margin holds over tones, noise and clicks, quiet windows near the bound read as stock,
and a recorded call's VAD decisions and volumes are stock's."""

from __future__ import annotations

import asyncio

import loudness
import numpy as np
import pytest
from pipecat.audio.vad.vad_analyzer import VADParams
from pipecat.audio.volume import AudioVolumeTracker

from agent.config import Config
from agent.pipeline import make_vad
from agent.quiet_volume import GAIN_DB, QuietGateVolumeTracker, quiet_energy_bound
from agent.shared_models import silero_session
from agent.vad_batcher import BatchedSileroVADAnalyzer, SileroBatcher
from testkit.phone_prompts import pcm8k, to_16k

RATES = [8000, 16000]


def k_gain_db(x: np.ndarray, rate: int) -> float:
    """How far BS.1770 reads a block above its unweighted mean square (the K-weighting's gain on it)."""
    mean_square = float(np.mean(x.astype(np.float64) ** 2))
    return loudness.integrated_loudness(x, rate) - (-0.691 + 10 * np.log10(mean_square))


@pytest.mark.parametrize("rate", RATES)
def test_the_k_weighting_stays_under_the_bound_gain(rate: int) -> None:
    n = int(np.ceil(0.4 * rate))
    t = np.arange(n) / rate
    rng = np.random.default_rng(rate)
    gains = [k_gain_db((0.01 * np.sin(2 * np.pi * f * t + ph)).astype(np.float32), rate)
             for f in np.geomspace(10, rate / 2 * 0.999, 200) for ph in (0.0, 1.9)]
    for _ in range(40):
        noise = rng.standard_normal(n) * 0.01
        clicks = np.zeros(n)
        clicks[rng.integers(0, n, 3)] = 0.3
        gains += [k_gain_db(s.astype(np.float32), rate) for s in (noise, np.diff(noise, prepend=0.0), clicks)]
    assert max(gains) < GAIN_DB - 1.0  # at least 1 dB of margin for the filters' rounding
    assert max(gains) > 3.0  # the sweep reaches the shelf: the check is not vacuous


def quiet_windows(rate: int) -> list[bytes]:
    """400 ms windows from ~0.3 to ~40 LSB RMS: noise, a tone near Nyquist, clicks, a DC offset."""
    n = int(np.ceil(0.4 * rate))
    rng = np.random.default_rng(7)
    t = np.arange(n) / rate
    out = []
    for rms in np.geomspace(0.3, 40, 40):
        shapes = [rng.standard_normal(n), np.sin(2 * np.pi * 0.49 * rate * t) * np.sqrt(2),
                  np.diff(rng.standard_normal(n), prepend=0.0) / np.sqrt(2), np.ones(n)]
        clicks = np.zeros(n)
        clicks[rng.integers(0, n, 2)] = rms * np.sqrt(n / 2)
        out += [np.round(s * rms).astype("<i2").tobytes() for s in shapes] + [np.round(clicks).astype("<i2").tobytes()]
    return out + [bytes(2 * n)]


@pytest.mark.parametrize("rate", RATES)
def test_quiet_windows_read_as_stock_and_only_zeros_are_skipped(rate: int) -> None:
    skipped = measured = 0
    for window in quiet_windows(rate):
        stock, gated = AudioVolumeTracker(), QuietGateVolumeTracker()
        stock.update(window, rate)
        gated.update(window, rate)
        assert gated.volume == stock.volume  # the same float, skipped or measured
        if gated.skipped:
            assert stock.volume == 0.0
            skipped += 1
        else:
            measured += 1
    assert skipped >= 20 and measured >= 20  # both sides of the bound are exercised
    # the bound sits within the gain margin of the gate: a window just over it measures above -70 LKFS or near it
    energy = quiet_energy_bound(rate) / int(0.4 * rate)
    assert 10 * np.log10(energy / 32768.0**2) - 0.691 + GAIN_DB == pytest.approx(-70.0)


def caller_audio(rate: int) -> bytes:
    """Silence, a recorded prompt, silence with a little line noise, another prompt, silence."""
    rng = np.random.default_rng(3)

    def prompt(name: str) -> bytes:
        pcm = pcm8k(name)
        return to_16k(pcm) if rate == 16000 else pcm

    noise = np.round(rng.standard_normal(rate) * 2).astype("<i2").tobytes()
    return bytes(rate) + prompt("agent-pass") + noise + prompt("vm-options") + bytes(rate * 2)


@pytest.mark.parametrize("rate", RATES)
def test_a_recorded_call_decides_as_stock(rate: int) -> None:
    params = VADParams(confidence=0.6, start_secs=0.1, stop_secs=0.2, min_volume=0.3)
    pcm = caller_audio(rate)
    step = rate // 50 * 2

    async def run(gate: bool) -> tuple[list, list, int]:
        batcher = SileroBatcher(silero_session())
        vad = BatchedSileroVADAnalyzer(params=params, batcher=batcher, quiet_gate=gate)
        vad.set_sample_rate(rate)
        states, volumes = [], []
        for i in range(0, len(pcm), step):
            states.append(await vad.analyze_audio(pcm[i:i + step]))
            volumes.append(vad._prev_volume)
        batcher.close()
        return states, volumes, getattr(vad._volume_tracker, "skipped", 0)

    stock_states, stock_volumes, _ = asyncio.run(run(False))
    states, volumes, skipped = asyncio.run(run(True))
    assert states == stock_states and volumes == stock_volumes
    assert len(set(stock_states)) >= 3  # the prompts were heard: quiet, speaking and back
    assert skipped > 40  # the silences skipped the measure


def test_the_config_turns_the_gate_on_and_off() -> None:
    config = Config()
    assert isinstance(make_vad(config)._volume_tracker, QuietGateVolumeTracker)
    config.vad.quiet_gate = False
    assert type(make_vad(config)._volume_tracker) is AudioVolumeTracker
