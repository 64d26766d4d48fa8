"""``ParakeetSTTService`` under pipecat on CUDA, built exactly as ``examples/gpu.toml`` builds it.

The service comes from ``create_parakeet_stt`` on the ASR options of the GPU config (bf16, the
``cuda_graphs`` encoder with streaming profiles, 2 s of left context, the shared ``StreamBatcher``)
over a random checkpoint *folder* written by ``bench/parakeet_checkpoint.py`` (toy size here), and
two callers talk at once through pipecat pipelines: each gets interims while speaking and one final
per utterance with its TTFB, from one batched engine. CUDA only; needs pipecat (carried as wheels on
the H200); async tests run under ``asyncio.run`` (no pytest plugin there)::

    python3 -m pytest -q -p no:cacheprovider tests/gpu/test_parakeet_stt_cuda.py
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import numpy as np
import pytest
import torch

pytest.importorskip("transformers")
pytest.importorskip("pipecat")

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]

ROOT = Path(__file__).resolve().parents[2]


def _frames(clip: np.ndarray) -> list:
    from pipecat.frames.frames import (
        InputAudioRawFrame,
        VADUserStartedSpeakingFrame,
        VADUserStoppedSpeakingFrame,
    )
    from pipecat.tests.utils import SleepFrame

    pcm = (np.clip(clip, -1, 1) * 32767).astype(np.int16)
    out: list = [VADUserStartedSpeakingFrame()]
    for lo in range(0, len(pcm), 320):  # 20 ms frames at twice real time
        out += [InputAudioRawFrame(audio=pcm[lo:lo + 320].tobytes(), sample_rate=16000, num_channels=1),
                SleepFrame(sleep=0.01)]
    return out + [VADUserStoppedSpeakingFrame(stop_secs=0.2), SleepFrame(sleep=1.0)]


def test_two_callers_on_the_gpu_config_asr(tmp_path):
    from pipecat.frames.frames import InterimTranscriptionFrame, MetricsFrame, TranscriptionFrame
    from pipecat.metrics.metrics import TTFBMetricsData
    from pipecat.pipeline.worker import PipelineParams
    from pipecat.tests.utils import run_test

    from agent.config import load_config
    from asr.parakeet.random_v3 import write_random_checkpoint as build
    from asr.parakeet.shared_engine import shared_parakeet_batcher
    from asr.parakeet.stt_service import create_parakeet_stt
    from asr.parakeet.tiny import synthetic_speech

    build(tmp_path / "parakeet", tiny=True)
    asr = load_config(ROOT / "examples" / "gpu.toml", [f"asr.model={tmp_path / 'parakeet'}",
                                                      "asr.stream_max_batch=16"]).asr
    assert (asr.device, asr.encoder_backend, asr.dtype) == ("cuda", "cuda_graphs", "bfloat16")
    batcher = shared_parakeet_batcher(asr)
    assert batcher.engine.device.type == "cuda"
    clips = [synthetic_speech(1.6, seed=41), synthetic_speech(1.4, seed=42)]

    async def caller(clip: np.ndarray) -> list:
        service = create_parakeet_stt(asr, audio_passthrough=False)
        assert service._batcher is batcher  # every caller shares the process's batched engine
        down, _ = await run_test(service, frames_to_send=_frames(clip),
                                 pipeline_params=PipelineParams(enable_metrics=True, audio_in_sample_rate=16000))
        return down

    async def both() -> list:
        return await asyncio.gather(*(caller(c) for c in clips))

    for down in asyncio.run(both()):
        finals = [f for f in down if isinstance(f, TranscriptionFrame)]
        assert len(finals) == 1 and finals[0].finalized and finals[0].text, [f.text for f in finals]
        assert all(w.startswith("t") and w[1:].isdigit() for w in finals[0].text.split())
        assert any(isinstance(f, InterimTranscriptionFrame) for f in down[:down.index(finals[0])])
        ttfb = [d.value for f in down if isinstance(f, MetricsFrame) for d in f.data
                if isinstance(d, TTFBMetricsData) and d.value > 0]
        assert len(ttfb) == 1 and 0.2 <= ttfb[0] < 2.0, ttfb
    assert batcher.stats.ticks > 0
