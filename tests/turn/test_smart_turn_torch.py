"""smart-turn v3 as a torch model (agent.smart_turn): the weights out of pipecat's int8 ONNX file, the features
equal to pipecat's, turn decisions on real recorded speech at least as right as the ONNX model's, and the
batcher scoring concurrent requests in one call with the results of scoring them alone."""

from __future__ import annotations

import asyncio
import random

import numpy as np
import pytest
import torch

from agent.smart_turn.batcher import TurnBatcher, bucket
from agent.smart_turn.features import SAMPLES, LogMel, last_window
from agent.smart_turn.onnx_weights import SmartTurnWeightsError, bundled_path, load_model
from testkit.corpus import prompts
from testkit.phone_prompts import pcm8k


def speech16k(name: str) -> np.ndarray:
    """A recorded prompt at 16 kHz, its leading and trailing quiet trimmed to 0.1 s."""
    import soxr

    audio = soxr.resample(np.frombuffer(pcm8k(name), "<i2").astype(np.float32) / 32768.0, 8000, 16000, quality="HQ")
    voiced = np.flatnonzero(np.convolve(np.abs(audio) > 0.02, np.ones(320), "same") > 0)
    return audio[max(0, voiced[0] - 1600): voiced[-1] + 1].astype(np.float32)


def framed(audio: np.ndarray) -> np.ndarray:
    """As the analyzer receives a turn: 0.25 s before the speech, 0.2 s of VAD stop after it."""
    return np.concatenate([np.zeros(4000, np.float32), audio, np.zeros(3200, np.float32)])


@pytest.fixture(scope="module")
def model():
    torch.set_num_threads(1)
    return load_model()


def test_weights_load_strictly_and_the_first_layer_matches_the_onnx_graph(model):
    """Every parameter is found (strict load) and conv1 + GELU reproduce the ONNX graph's own activation
    within the int8 activation step (a misnamed or transposed weight is off by the activation's scale)."""
    import onnx
    import onnxruntime as ort
    from pipecat.audio.turn.smart_turn._whisper_features import compute_whisper_log_mel_features

    graph = onnx.load(str(bundled_path()))
    graph.graph.output.append(onnx.helper.make_tensor_value_info("gelu", onnx.TensorProto.FLOAT, None))
    session = ort.InferenceSession(graph.SerializeToString(), providers=["CPUExecutionProvider"])
    features = compute_whisper_log_mel_features(last_window(framed(speech16k("agent-pass"))))[None]
    reference = session.run(["gelu"], {"input_features": features})[0]
    from onnx import numpy_helper

    step = float(numpy_helper.to_array(next(t for t in graph.graph.initializer if t.name == "gelu_scale")))
    conv = model.encoder.conv1
    with torch.inference_mode():
        mine = torch.nn.functional.gelu(conv(torch.from_numpy(features))).numpy()
        flipped = torch.nn.functional.gelu(torch.nn.functional.conv1d(  # a kernel read the wrong way round
            torch.from_numpy(features), conv.weight.flip(-1), conv.bias, padding=1)).numpy()
    assert reference.shape == mine.shape
    error, wrong = np.abs(reference - mine), np.abs(reference - flipped)
    print(f"\nconv1 vs the ONNX graph: mean {error.mean():.4f}, max {error.max():.4f}; flipped kernel mean "
          f"{wrong.mean():.4f}; activation step {step:.4f}")
    assert error.mean() < step and error.max() < 6 * step  # within the int8 activations' rounding
    assert wrong.mean() > 3 * error.mean()  # the check tells a misread weight apart


def test_features_match_pipecats_numpy_ones():
    from pipecat.audio.turn.smart_turn._whisper_features import compute_whisper_log_mel_features

    mel = LogMel()
    for name, cut in (("agent-pass", 1.0), ("conf-getpin", 0.5)):
        audio = speech16k(name)
        window = last_window(framed(audio[: int(len(audio) * cut)]))
        expected = compute_whisper_log_mel_features(window)
        got = mel(torch.from_numpy(window)[None])[0].numpy()
        assert got.shape == expected.shape == (80, 800)
        assert np.abs(got - expected).max() < 1e-3


def test_long_audio_keeps_its_last_8_seconds_short_audio_is_padded_in_front():
    audio = np.arange(SAMPLES + 5, dtype=np.float32)
    assert np.array_equal(last_window(audio), audio[5:])
    short = np.ones(10, np.float32)
    window = last_window(short)
    assert window.shape == (SAMPLES,) and window[-10:].sum() == 10 and window[:-10].sum() == 0


def test_turn_decisions_on_recorded_speech_are_at_least_as_right_as_the_onnx_models(model):
    """40 recorded prompts of 4+ words, each whole (a finished turn) and cut at 55% (unfinished): the torch
    model (float activations) is right at least as often as pipecat's int8 model, less 2, on each kind,
    and the two agree on most."""
    from agent.shared_models import SharedSmartTurnAnalyzerV3

    chosen = random.Random(1).sample([p for p in prompts() if len(p.text.split()) >= 4], 40)
    onnx, mel = SharedSmartTurnAnalyzerV3(), LogMel()
    right = {"onnx": {"whole": 0, "cut": 0}, "torch": {"whole": 0, "cut": 0}}
    agree = 0
    for prompt in chosen:
        audio = speech16k(prompt.name)
        for kind, clip in (("whole", audio), ("cut", audio[: int(len(audio) * 0.55)])):
            x = framed(clip)
            p_onnx = onnx._predict_endpoint(x)["probability"]
            with torch.inference_mode():
                p_torch = float(model(mel(torch.from_numpy(last_window(x))[None]))[0])
            for name, p in (("onnx", p_onnx), ("torch", p_torch)):
                right[name][kind] += (p > 0.5) == (kind == "whole")
            agree += (p_onnx > 0.5) == (p_torch > 0.5)
    print(f"\nright of 40: {right}; same decision {agree} of 80")
    for kind in ("whole", "cut"):
        assert right["torch"][kind] >= right["onnx"][kind] - 2
    assert right["torch"]["whole"] >= 30 and right["torch"]["cut"] >= 25
    assert agree >= 64


def test_a_truncated_or_foreign_file_is_refused_clearly(tmp_path):
    cut = tmp_path / "cut.onnx"
    cut.write_bytes(bundled_path().read_bytes()[:100_000])
    with pytest.raises(SmartTurnWeightsError, match="cut.onnx"):
        load_model(cut)
    silero = tmp_path / "silero.onnx"
    from importlib import resources

    silero.write_bytes(resources.files("pipecat.audio.vad.data").joinpath("silero_vad.onnx").read_bytes())
    with pytest.raises(SmartTurnWeightsError, match="silero.onnx"):
        load_model(silero)


def test_buckets():
    assert [bucket(n, 64) for n in (1, 2, 3, 5, 9, 33, 64, 80)] == [1, 2, 4, 8, 16, 64, 64, 64]
    assert bucket(20, 24) == 24


async def test_concurrent_requests_share_one_call_and_score_as_alone(model):
    batcher = TurnBatcher(model, device="cpu", max_batch=8)
    names = ["agent-pass", "conf-getpin", "vm-incorrect", "pbx-invalid", "queue-thankyou"]
    clips = [framed(speech16k(n)) for n in names] + [framed(speech16k("conf-getpin")[:8000])]
    alone = [float(batcher.score(last_window(c)[None])[0]) for c in clips]
    try:
        together = await asyncio.gather(*(batcher.predict(c) for c in clips))
    finally:
        await batcher.aclose()
    assert np.allclose(together, alone, atol=1e-4)
    assert batcher.stats.requests == len(clips) and batcher.stats.batches <= 2  # the first alone, the rest together
    assert max(batcher.stats.batch_sizes) >= len(clips) - 1


async def test_a_batch_that_does_not_finish_reads_as_stalled(model):
    """The engine's watchdog (agent/engine_watchdog.py) reads ``stalled_s``: the age of the batch being scored (here
    held, the CPU stand-in for a hung GPU), 0 when none is."""
    from testkit.held_call import held_call

    batcher = TurnBatcher(model, device="cpu", max_batch=8)
    try:
        with held_call(batcher, "score") as release:
            assert batcher.stalled_s() == 0.0
            pending = asyncio.ensure_future(batcher.predict(framed(speech16k("agent-pass"))))
            await asyncio.sleep(0.3)
            assert batcher.stalled_s() >= 0.25
            release.set()
            assert 0.0 <= await asyncio.wait_for(pending, 30) <= 1.0
            assert batcher.stalled_s() == 0.0
    finally:
        await batcher.aclose()


def test_a_buckets_padding_is_silence_after_a_larger_batch_without_rewriting_it_every_call(model):
    """Padding rows are zeroed only where an earlier, larger batch left audio (the staging buffer's rows are 512 KB),
    and a padded batch scores each request as it scores alone."""
    batcher = TurnBatcher(model, device="cpu", max_batch=8)
    clips = [framed(speech16k(n)) for n in ("agent-pass", "conf-getpin", "vm-incorrect")]
    staging = batcher._staging
    batcher.score(clips * 2, rows=8)  # rows 0-5 hold audio
    padded = batcher.score(clips[:1], rows=2)
    assert float(staging[1].abs().max()) == 0.0 and float(staging[3].abs().max()) > 0.0  # row 3: past the bucket
    batcher.score(clips[:2], rows=8)
    assert float(staging[2:].abs().max()) == 0.0
    alone = batcher.score(clips[:1], rows=1)
    assert np.allclose(padded, alone, atol=1e-5)


def test_the_npz_form_loads_the_same_model_and_a_bad_one_is_refused(model, tmp_path):
    """The .npz (for the H200 image, which has neither onnx nor pipecat) scores as the ONNX-loaded model."""
    from agent.smart_turn.onnx_weights import _read_npz, load_state_dict, save_npz

    path = save_npz(tmp_path / "smart_turn.npz")
    assert path.stat().st_size < 9_000_000  # int8 weights with their scales, not 15 MB of float32
    exact = load_state_dict()
    read = _read_npz(path)
    assert read.keys() == exact.keys() and all(np.array_equal(read[k], exact[k]) for k in exact)
    again = load_model(path)
    x = LogMel()(torch.from_numpy(last_window(framed(speech16k("conf-getpin"))))[None])
    with torch.inference_mode():
        assert abs(float(again(x)[0]) - float(model(x)[0])) < 1e-6
    (tmp_path / "bad.npz").write_bytes(b"not a zip")
    with pytest.raises(SmartTurnWeightsError, match="bad.npz"):
        load_model(tmp_path / "bad.npz")


def test_the_mel_filters_are_whispers():
    from pipecat.audio.turn.smart_turn._whisper_features import _MEL_FILTERS

    from agent.smart_turn.features import mel_filters

    assert np.abs(mel_filters() - _MEL_FILTERS.T).max() < 1e-12
