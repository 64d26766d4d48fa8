"""The shared-session Silero VAD and smart-turn analyzers decide exactly as pipecat's stock ones,
keep per-caller state apart, and cost a caller's connect no model load."""

from __future__ import annotations

import asyncio
import time

import numpy as np
from pipecat.audio.turn.smart_turn.local_smart_turn_v3 import LocalSmartTurnAnalyzerV3
from pipecat.audio.vad.silero import SileroVADAnalyzer

from agent.shared_models import SharedSileroVADAnalyzer, SharedSmartTurnAnalyzerV3


def speech16k() -> bytes:
    import soxr

    from testkit.phone_prompts import pcm8k

    pcm = np.frombuffer(pcm8k("agent-pass"), "<i2").astype(np.float32) / 32768.0
    audio = soxr.resample(pcm, 8000, 16000)
    audio = np.concatenate([np.zeros(8000, np.float32), audio, np.zeros(16000, np.float32)])
    return (audio * 32767).astype("<i2").tobytes()


def confidences(analyzer, pcm: bytes) -> list[float]:
    analyzer.set_sample_rate(16000)
    step = analyzer.num_frames_required() * 2
    return [analyzer.voice_confidence(pcm[i:i + step]) for i in range(0, len(pcm) - step, step)]


def test_shared_silero_matches_stock_and_keeps_state_per_caller():
    pcm = speech16k()
    stock = confidences(SileroVADAnalyzer(), pcm)
    a, b = SharedSileroVADAnalyzer(), SharedSileroVADAnalyzer()
    assert a._model.session is b._model.session
    mine = confidences(a, pcm)
    assert np.allclose(stock, mine, atol=1e-5) and max(mine) > 0.9 and min(mine) < 0.1
    # b starts fresh: a's recurrent state did not leak into it
    assert np.allclose(confidences(b, pcm[:32000]), stock[: len(confidences(SileroVADAnalyzer(), pcm[:32000]))],
                       atol=1e-5)


def test_shared_smart_turn_matches_stock_and_connects_fast():
    pcm = np.frombuffer(speech16k(), "<i2").astype(np.float32) / 32768.0
    stock, shared = LocalSmartTurnAnalyzerV3(), SharedSmartTurnAnalyzerV3()
    expected = stock._predict_endpoint(pcm)
    got = shared._predict_endpoint(pcm)
    assert got["prediction"] == expected["prediction"]
    assert abs(got["probability"] - expected["probability"]) < 1e-5
    t0 = time.perf_counter()
    for _ in range(20):
        SharedSmartTurnAnalyzerV3()
        SharedSileroVADAnalyzer()
    per_caller_ms = (time.perf_counter() - t0) / 20 * 1000
    print(f"\nshared analyzers: {per_caller_ms:.2f} ms per caller")
    assert per_caller_ms < 20  # stock: ~280 ms of ONNX session loading per caller on this box
    asyncio.run(shared.cleanup())
