"""Kokoro-82M (full size, random weights) on CUDA: the batched forward equals batch-1 per item, bf16 stays
close, and the engine's warm-up measures its peak memory.

CUDA only (the CPU versions are tests/gputts). Needs torch and numpy only; no pipecat or pytest plugin::

    python3 -m pytest -q -p no:cacheprovider tests/gpu/test_kokoro_cuda.py
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest
import torch

from tts.kokoro import config as kconfig
from tts.kokoro.checkpoint import build_random, random_voice
from tts.kokoro.model import KokoroModel, Utterance

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]

IDS = [
    [50, 83, 54, 156, 31, 16, 65, 156, 87, 123, 54, 46, 3, 16, 50, 156, 39, 16, 69, 123, 16, 52, 63, 6],
    [102, 62, 16, 56, 156, 47, 61, 4],
    [44, 135, 62, 16, 102, 62, 16, 65, 156, 57, 56, 62, 16, 123, 156, 63, 56, 16, 53, 156, 138, 61, 62, 4] * 3,
    [81, 4],
]


@pytest.fixture(scope="module")
def model() -> Iterator[KokoroModel]:
    saved = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    m = build_random(kconfig.full_config(), seed=0)
    with torch.no_grad():  # keep the random model's audio inside [-1, 1] so the output clip hides nothing
        m.decoder.generator.conv_post.weight.mul_(0.1)
        m.decoder.generator.conv_post.bias.fill_(-3.0)
    m = m.to("cuda")
    yield m
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved


def _items(m: KokoroModel) -> list[Utterance]:
    voice = random_voice(m.config, seed=0)[:, 0]
    return [Utterance(ids, voice[len(ids) - 1], 1.0, seed=i) for i, ids in enumerate(IDS)]


def test_batched_equals_alone_fp32(model: KokoroModel) -> None:
    items = _items(model)
    batched = model.synthesize(items, frame_bucket=8)
    for row, item in enumerate(items):
        alone = model.synthesize([item]).audio[0]
        assert batched.durations[row] == model.synthesize([item]).durations[0]
        assert len(alone) == len(batched.audio[row]) == 600 * sum(batched.durations[row])
        assert np.isfinite(alone).all() and 1e-4 < np.abs(alone).max() < 1.0
        assert np.abs(batched.audio[row] - alone).max() < 1e-3 * np.abs(alone).max()


def test_bf16_decoder_batched_matches_alone_and_fp32(model: KokoroModel) -> None:
    items = _items(model)
    ref = model.synthesize(items).audio
    model.set_decoder_dtype(torch.bfloat16)
    try:
        batched = model.synthesize(items, frame_bucket=8).audio
        for row, item in enumerate(items):
            alone = model.synthesize([item]).audio[0]
            assert np.isfinite(alone).all()
            scale = np.abs(ref[row]).max()
            assert np.abs(batched[row] - alone).max() < 0.1 * scale
            rel = np.linalg.norm(batched[row] - ref[row]) / np.linalg.norm(ref[row])
            print(f"item {row}: bf16 vs fp32 relative L2 error {rel:.4f}")
            assert rel < 0.5
    finally:
        model.set_decoder_dtype(torch.float32)


def test_engine_reports_measured_peak_memory() -> None:
    from tts.kokoro.engine import KokoroEngine
    from tts.kokoro.options import KokoroOptions

    engine = KokoroEngine(KokoroOptions(device="cuda", g2p="chars", max_batch=16, warmup=True))
    try:
        report = engine.memory
        assert report.warmup_batch == 16 and report.warmup_audio_s > 16
        assert 300e6 < report.weights_bytes < 360e6  # 81.8 M float32 parameters
        assert report.peak_bytes is not None and report.peak_bytes > 0
        assert report.required_bytes == report.weights_bytes + report.peak_bytes
        print(f"kokoro x16 warm-up: {report.as_dict()}")
        pieces = list(engine.synthesize("Hello there. This runs on the GPU."))
        assert len(pieces) == 2 and all(pieces)
    finally:
        engine.close()


def _rel(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


def test_compiled_decoder_matches_eager(model: KokoroModel) -> None:
    """torch.compile'd fused steps (Triton): fp32 equals eager fp32; bf16 is no further from fp32 than eager bf16."""
    items = _items(model)
    ref = model.synthesize(items, frame_bucket=8).audio
    # batch 1 against batch 1: unpadded, cuDNN may pick other fp32 algorithms than for the padded batch (on the H100
    # compiled alone against the eager batch differed by 3.9e-3 of this quiet clip's peak), so compare like shapes
    ref_alone = model.synthesize(items[1:2]).audio[0]
    model.set_decoder_dtype(torch.bfloat16)
    eager_bf16 = model.synthesize(items, frame_bucket=8).audio
    model.set_decoder_dtype(torch.float32)
    model.set_compiled(True)
    try:
        fp32 = model.synthesize(items, frame_bucket=8).audio
        alone = model.synthesize(items[1:2]).audio[0]  # batch 1 is its own graph
        model.set_decoder_dtype(torch.bfloat16)
        bf16 = model.synthesize(items, frame_bucket=8).audio
    finally:
        model.set_compiled(False)
        model.set_decoder_dtype(torch.float32)
    assert np.abs(alone - ref_alone).max() < 1e-3 * np.abs(ref_alone).max()
    for row in range(len(items)):
        assert len(fp32[row]) == len(bf16[row]) == len(ref[row])
        assert np.abs(fp32[row] - ref[row]).max() < 1e-3 * np.abs(ref[row]).max()
        e, c = _rel(eager_bf16[row], ref[row]), _rel(bf16[row], ref[row])
        print(f"item {row}: relative L2 vs fp32 eager: bf16 eager {e:.4f}, bf16 compiled {c:.4f}")
        assert np.isfinite(bf16[row]).all() and c <= max(1.5 * e, 0.02)


def test_decoder_graphs_match_eager(model: KokoroModel) -> None:
    """The decoder replayed from CUDA graphs equals the eager decoder per item; a batch past every bucket is
    replayed in groups of rows that each fit one. fp32: eager at its own padding (frame_bucket 8, batch 1 unpadded) against the graph's larger
    bucket (rows of length 0, padded frames): padding changes nothing beyond rounding. bf16 (eager kernels and
    compiled): eager padded like the bucket (frame_bucket 32), so both run the same shapes; across paddings bf16
    differs by its own noise (cuDNN picks other algorithms per shape: 7% of a quiet clip's peak on the H200)."""
    items = _items(model)
    rows = {}
    for dtype, compiled in ((torch.float32, False), (torch.bfloat16, False), (torch.bfloat16, True)):
        fb = 8 if dtype == torch.float32 else 32
        model.set_decoder_dtype(dtype)
        model.set_compiled(compiled)
        try:
            eager = model.synthesize(items, frame_bucket=fb).audio
            eager_one = model.synthesize(items[1:2], frame_bucket=1 if fb == 8 else fb).audio[0]
            graphs = model.enable_decoder_graphs(max_batch=8, frame_step=32, max_frames=512, max_cells=8 * 512,
                                                 plan="fewest")
            replayed = model.synthesize(items, frame_bucket=fb).audio  # 4 items -> the (4, f) bucket
            one = model.synthesize(items[1:2], frame_bucket=1 if fb == 8 else fb).audio[0]  # batch 1
            assert graphs.replays == 2 and graphs.fallbacks == 0
            too_long = model.synthesize(items * 3, frame_bucket=fb)  # 12 items > max_batch 8: groups of 8 + 4
            assert graphs.split_batches == 1 and graphs.replays == 4 and graphs.fallbacks == 0
        finally:
            model.graphs = None
            model.set_compiled(False)
            model.set_decoder_dtype(torch.float32)
        tol = 1e-3 if dtype == torch.float32 else 1e-2
        for row in range(len(items)):
            assert len(replayed[row]) == len(eager[row])
            err = np.abs(replayed[row] - eager[row]).max() / np.abs(eager[row]).max()
            rows[(str(dtype), compiled, row)] = err
            assert np.isfinite(replayed[row]).all() and err < tol, (dtype, compiled, row, err)
            # each copy of the item, replayed in its group (other rows, other padded frames than the eager batch's:
            # in bf16 that is its noise across paddings, up to ~7% of a quiet clip's peak)
            group_tol = tol if dtype == torch.float32 else 0.1
            for copy in range(3):
                got = too_long.audio[row + copy * len(items)]
                assert len(got) == len(eager[row]) and np.isfinite(got).all()
                err = np.abs(got - eager[row]).max() / np.abs(eager[row]).max()
                assert err < group_tol, (dtype, compiled, row, copy, err)
        assert len(one) == len(eager_one)
        err = np.abs(one - eager_one).max() / np.abs(eager_one).max()
        rows[(str(dtype), compiled, "alone")] = err
        assert err < tol, (dtype, compiled, "alone", err)
    print("graphs vs eager, max abs error / peak:", {k: f"{v:.2e}" for k, v in rows.items()})


def test_cost_plan_times_every_bucket_and_matches_eager(model: KokoroModel) -> None:
    """The default plan on both graph sets: every bucket's replay is timed at capture (a bucket of more rows and
    frames or tokens takes longer), and a batch cut into the groups of least summed time gives each item the eager
    batch's durations and audio."""
    items = _items(model)
    eager_batch = model.synthesize(items * 3, frame_bucket=8)
    eager = eager_batch.audio
    try:
        graphs = model.enable_decoder_graphs(max_batch=8, frame_step=32, max_frames=512, max_cells=8 * 512)
        text = model.enable_text_graphs(max_batch=8, token_step=32, max_tokens=128, max_cells=8 * 128)
        for g, small, big in ((graphs, (1, 32), (8, 512)), (text, (1, 32), (8, 128))):
            assert g.plan_mode == "cost" and set(g.replay_ms) == set(g.sizes)
            assert all(ms > 0 for ms in g.replay_ms.values())
            assert g.replay_ms[big] > g.replay_ms[small]
        planned_batch = model.synthesize(items * 3, frame_bucket=8)
        planned = planned_batch.audio
        assert graphs.fallbacks == 0 and graphs.replays >= 2 and text.fallbacks == 0 and text.replays >= 2
        print(f"cost plan: acoustic {graphs.replays} replays, {graphs.split_batches} split, replay ms 1x32 "
              f"{graphs.replay_ms[(1, 32)]:.2f}, 8x512 {graphs.replay_ms[(8, 512)]:.2f}; text {text.replays} "
              f"replays, {text.split_batches} split, 1x32 {text.replay_ms[(1, 32)]:.2f}, 8x128 "
              f"{text.replay_ms[(8, 128)]:.2f}")
    finally:
        model.graphs = None
        model.text_graphs = None
    assert planned_batch.durations == eager_batch.durations
    for row, want in enumerate(eager):
        assert len(planned[row]) == len(want)
        err = np.abs(planned[row] - want).max() / np.abs(want).max()
        assert np.isfinite(planned[row]).all() and err < 1e-3, (row, err)


def test_text_graphs_match_eager(model: KokoroModel) -> None:
    """The text side replayed from CUDA graphs (ALBERT, encoders, masked BiLSTMs over a larger padded bucket)
    gives the eager durations and audio; a batch past every bucket is replayed in groups of rows."""
    items = _items(model)
    eager = model.synthesize(items, frame_bucket=8)
    eager_one = model.synthesize(items[1:2], frame_bucket=8)
    try:
        graphs = model.enable_text_graphs(max_batch=8, token_step=32, max_tokens=128, max_cells=8 * 128,
                                          plan="fewest")
        assert graphs.captured == 4 * 4  # batches 1, 2, 4, 8 x tokens 32..128
        replayed = model.synthesize(items, frame_bucket=8)  # 4 items of <= 74 tokens -> the (4, 96) bucket
        one = model.synthesize(items[1:2], frame_bucket=8)  # the (1, 32) bucket
        assert graphs.replays == 2 and graphs.fallbacks == 0
        grouped = model.synthesize(items * 3, frame_bucket=8)  # 12 items > max_batch 8: groups of 8 + 4
        assert graphs.split_batches == 1 and graphs.replays == 4 and graphs.fallbacks == 0
    finally:
        model.text_graphs = None
    assert replayed.durations == eager.durations and one.durations == eager_one.durations
    assert grouped.durations == eager.durations * 3
    for got, ref in [*zip(replayed.audio, eager.audio, strict=True), (one.audio[0], eager_one.audio[0])]:
        assert len(got) == len(ref) and np.isfinite(got).all()
        assert np.abs(got - ref).max() < 1e-3 * np.abs(ref).max()


def test_engine_with_decoder_graphs_streams() -> None:
    from tts.kokoro.engine import KokoroEngine
    from tts.kokoro.options import KokoroOptions

    engine = KokoroEngine(KokoroOptions(device="cuda", g2p="chars", max_batch=16, dtype="bfloat16",
                                        cuda_graphs=True, graph_max_frames=256, graph_max_cells=16 * 256))
    try:
        graphs = engine.model.graphs
        assert graphs is not None and graphs.captured == 5 * 8  # batches 1..16 x frames 32..256
        assert graphs.replays >= 1  # the warm-up batch replayed its bucket
        text = engine.model.text_graphs
        assert text is not None and text.captured == 5 * 8 and text.replays >= 1  # batches 1..16 x tokens 32..256
        pieces = list(engine.synthesize("Hello there. This runs on the GPU, replayed from graphs."))
        assert len(pieces) == 2 and all(pieces)
        print(f"kokoro graphs: {graphs.captured} buckets in {graphs.capture_s:.1f} s; warm-up {engine.memory.as_dict()}")
    finally:
        engine.close()


def test_first_lane_replays_its_own_graphs_beside_the_main_lane() -> None:
    """The first-clause lane (its own thread, high-priority stream and graphs) gives the main lane's audio, and a
    first clause queued behind a large batch of later clauses is served without waiting for that batch."""
    import time

    from tts.kokoro.engine import KokoroEngine
    from tts.kokoro.options import KokoroOptions

    engine = KokoroEngine(KokoroOptions(device="cuda", g2p="chars", max_batch=32, dtype="bfloat16", cuda_graphs=True,
                                        graph_max_frames=256, graph_max_cells=32 * 256, first_lane=True,
                                        first_lane_max_batch=8, first_lane_max_frames=128, first_lane_max_tokens=96))
    try:
        lane, batcher = engine.first_model, engine.batcher
        assert lane is not None and lane.graphs is not None and lane.graphs is not engine.model.graphs
        assert lane.graphs.captured == 4 * 4 and lane.text_graphs is not None  # batches 1..8 x frames 32..128
        ids = engine.phoneme_ids("Thanks for waiting.")
        first = batcher.submit_future(engine.utterance(ids, seed=3)).future.result()
        later = batcher.submit_future(engine.utterance(ids, seed=3), time.monotonic() + 30).future.result()
        assert np.abs(first - later).max() < 2e-2  # bf16 decoder, the same buckets' shapes
        replays = lane.graphs.replays
        long_ids = engine.phoneme_ids("This is one of the later clauses, long enough to keep the main lane busy.")
        # Both lanes replaying at once, round after round: graph sets captured on one stream share cuBLAS's workspace
        # (pytorch#193402) and hung the GPU within seconds of the ramp in cb4ad90's run; each set now has its own.
        waits = []
        for _ in range(40):
            with batcher.held():
                bulk = [batcher.submit_future(engine.utterance(long_ids), time.monotonic() + 30) for _ in range(32)]
            time.sleep(0.002)  # the main lane has taken its batch
            t0 = time.perf_counter()
            audio = batcher.submit_future(engine.utterance(ids)).future.result(timeout=30)
            waits.append(time.perf_counter() - t0)
            assert np.isfinite(audio).all() and len(audio) > 0
            for r in bulk:
                out = r.future.result(timeout=30)
                assert np.isfinite(out).all() and len(out) > 0
        assert lane.graphs.replays >= replays + 40 and batcher.stats.first_lane_ticks >= 40
        waits.sort()
        print(f"first clause beside a batch of 32 later clauses, 40 rounds: p50 {waits[20] * 1e3:.1f} ms, "
              f"max {waits[-1] * 1e3:.1f} ms")
    finally:
        engine.close()
