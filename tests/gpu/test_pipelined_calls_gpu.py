"""``GpuTranscriber.submit``/``result``: calls enqueued back to back (the window batcher hands over the next
batch while the GPU decodes this one) give exactly the tokens of the same calls run one at a time, across
profiles that share a decoder graph and batches split over a profile's batch size."""

from __future__ import annotations

import numpy as np
import pytest
import torch

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA"),
    pytest.mark.timeout(300),
]


def padded(clips: list[np.ndarray]) -> tuple[torch.Tensor, np.ndarray]:
    from asr.offline.parakeet_fast import padded_batch

    return padded_batch(clips)


def test_submitted_calls_give_the_tokens_of_calls_run_one_at_a_time() -> None:
    pytest.importorskip("triton")
    from asr.parakeet.encoders.shape_profiles import parse_profiles
    from asr.parakeet.gpu.fast_transcriber import GpuTranscriber
    from asr.parakeet.tiny import block_speech
    from tests.gpu.fast_path_reference import reference_model

    model = reference_model("tiny")
    # a and b share the batch-4 decoder graph at different frames; 5 clips of one profile split as 4 + 1
    fast = GpuTranscriber(model, parse_profiles("a=4x512,b=4x1216,c=8x1216"), dtype=torch.bfloat16)
    clips = [block_speech(float(s), seed=3000 + i)[0] for i, s in enumerate(np.linspace(1.0, 12.0, 23))]
    calls = [clips[0:5], clips[5:8], clips[8:16], clips[16:17], clips[17:23], clips[2:7] + clips[18:20]]
    for call in calls:
        fast.transcribe([padded(call)])  # build every graph first

    def key(seqs: list) -> list[tuple]:
        return [(s.tokens, s.frames, s.durations) for s in seqs]

    alone = [key(fast.transcribe([padded(call)])) for call in calls]
    assert sum(len(t) for seqs in alone for t, _, _ in seqs) > 0, "the model emits no token: nothing is compared"
    flights = [fast.submit([padded(call)]) for call in calls]  # all enqueued before any result is read
    assert [key(fast.result(f)) for f in flights] == alone
    got, previous = [], None  # the batcher's order: submit k+1, wait for k's encoder, then read k
    for call in calls:
        flight = fast.submit([padded(call)])
        if previous is not None:
            previous.wait_encoded()
            got.append(key(fast.result(previous)))
        previous = flight
    got.append(key(fast.result(previous)))
    assert got == alone
