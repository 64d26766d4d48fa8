"""The fast Parakeet backend's adapter on the CPU: window -> profile mapping, tokens -> words.

``GpuTranscriber`` needs CUDA; ``ProfiledTranscriber`` keeps its contract (profiles chosen by
``plan_batches``, audio padded to the profile's shape, the same FastConformer) on the CPU, so the
adapter around it must give exactly the general path's words on a tiny random Parakeet.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from asr.offline.window_engine import EngineSpec, parakeet_backend
from tests.offline.settings import ROOT

pytest.importorskip("torch")
pytest.importorskip("transformers")

PROFILES = "a=2x256,b=3x512,c=2x1024"  # up to 2.5 s, 5.1 s and 10.2 s; small batches force splits


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from asr.parakeet.tiny import make_tiny_checkpoint

    return make_tiny_checkpoint(tmp_path_factory.mktemp("tiny") / "ckpt")


def test_backend_choice() -> None:
    assert parakeet_backend(EngineSpec(engine="parakeet", device="cuda:1")) == "fast"
    assert parakeet_backend(EngineSpec(engine="parakeet", device="cpu")) == "general"
    assert parakeet_backend(EngineSpec(engine="parakeet", device="cuda", parakeet_backend="general")) == "general"
    assert parakeet_backend(EngineSpec(engine="parakeet", device="cpu", parakeet_backend="FAST")) == "fast"
    with pytest.raises(ValueError, match="unknown parakeet backend"):
        parakeet_backend(EngineSpec(parakeet_backend="turbo"))


def test_windows_go_to_the_shortest_profile_that_holds_them() -> None:
    from asr.offline.parakeet_fast import plan_for, profile_groups
    from asr.parakeet.encoders.shape_profiles import parse_profiles

    profiles = parse_profiles(PROFILES)
    hop = 160
    lengths = [255 * hop, 256 * hop, 100, 511 * hop, 1023 * hop, 300 * hop, 2 * hop]
    # frames = samples // 160 + 1: 256 fits a (256), 257 needs b, 512 fits b, 1024 fits c.
    assert profile_groups(lengths, profiles) == [[0, 6, 2], [3, 5, 1], [4]]
    with pytest.raises(ValueError, match="exceeds every encoder profile"):
        profile_groups([1024 * hop], profiles)
    assert plan_for(profiles).max_window_s == pytest.approx(1023 * hop / 16000)
    assert plan_for(parse_profiles("x=8x30016"), 0.0).max_window_s == 30.0
    with pytest.raises(ValueError, match="longest encoder profile"):
        plan_for(parse_profiles("x=8x512"))


def test_fast_adapter_gives_the_general_paths_words(tiny: Path) -> None:
    from asr.offline.engine_factory import make_engine
    from asr.offline.parakeet_engine import ParakeetWindowEngine
    from asr.offline.parakeet_fast import FastParakeetWindowEngine
    from testkit.offline_audio import speech_track

    general = make_engine(EngineSpec(engine="parakeet", model=str(tiny), device="cpu"))
    fast = make_engine(EngineSpec(engine="parakeet", model=str(tiny), device="cpu", parakeet_backend="fast",
                                  profiles=PROFILES))
    assert isinstance(general, ParakeetWindowEngine) and isinstance(fast, FastParakeetWindowEngine)
    assert fast.plan.max_window_s <= 10.23 and fast.name == general.name
    audio, _ = speech_track(40, seed=5)
    seconds = [0.4, 2.5, 2.6, 4.0, 5.1, 6.0, 9.9, 10.2, 1.0, 3.3, 7.7]  # 5 to c: split over its batch of 2
    windows = [audio[int(i * 16000):int((i + s) * 16000)] for i, s in enumerate(seconds)]
    want = general.transcribe_windows(windows, None)
    got = fast.transcribe_windows(windows, None)
    assert sum(map(len, want)) > 20
    assert got == want  # same text, same frame times, same leading spaces
    assert fast.transcribe_windows([], None) == []


def test_cpu_fast_backend_never_imports_cuda_code(tiny: Path) -> None:
    """On the CPU the fast backend runs without the CUDA-only modules (graph decoder, GPU transcriber)."""
    code = (
        "import sys; from asr.offline.engine_factory import make_engine; from asr.offline.window_engine import EngineSpec\n"
        f"e = make_engine(EngineSpec(engine='parakeet', model={str(tiny)!r}, device='cpu',"
        f" parakeet_backend='fast', profiles='a=1x1024'))\n"
        "import numpy as np; e.transcribe_windows([np.zeros(16000, np.float32)], None)\n"
        "bad = [m for m in ('asr.parakeet.gpu.fast_transcriber', 'asr.parakeet.decoding.graph_decoder') if m in sys.modules]\n"
        "assert not bad, bad; print('ok')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and out.stdout.strip().endswith("ok"), out.stderr[-2000:]


def test_the_fast_backend_rejects_other_front_ends() -> None:
    from asr.offline.parakeet_fast import check_features
    from asr.parakeet.features import FeatureConfig

    check_features(FeatureConfig(n_mels=80))
    with pytest.raises(ValueError, match="--parakeet-backend general"):
        check_features(FeatureConfig(hop_length=320))
    assert np.isfinite(FeatureConfig().log_guard)


def test_the_batcher_keeps_each_batch_in_one_profile(tiny: Path) -> None:
    """Every profile replays at its whole batch, so a batch spanning two profiles costs two replays: the
    batcher fills each batch from one length class, the fullest first, and a window of a class that
    cannot fill a batch waits at most ``MAX_PASSED`` batches. Words are those of each window alone."""
    import asyncio
    import threading

    from asr.offline.engine_factory import make_engine
    from asr.offline.window_batcher import MAX_PASSED, WindowBatcher
    from testkit.offline_audio import speech_track

    fast = make_engine(EngineSpec(engine="parakeet", model=str(tiny), device="cpu", parakeet_backend="fast",
                                  profiles="a=3x256,b=3x512,c=3x1024"))
    release, batches = threading.Event(), []

    class Recording:
        name, sample_rate, plan, max_batch, languages = fast.name, 16000, fast.plan, 3, None
        length_class = fast.length_class

        def transcribe_windows(self, windows: list[np.ndarray], language: str | None) -> list:
            release.wait(30)
            batches.append([fast.length_class(len(w)) for w in windows])
            return fast.transcribe_windows(windows, language)

    audio, _ = speech_track(40, seed=6)
    cut = [audio[int(i * 16000):int((i + s) * 16000)] for i, s in enumerate([8.0, 2.0, 1.5, 4.0, 3.0, 1.0, 4.5])]
    requests = [[cut[0]], [cut[1], cut[3]], [cut[2], cut[4]], [cut[5], cut[6]]]  # c first; then a, b, a, b, a, b
    batcher = WindowBatcher(Recording())

    async def run() -> list[list]:
        tasks = [asyncio.create_task(batcher.transcribe(r, None)) for r in requests]
        await asyncio.sleep(0.2)
        release.set()
        return list(await asyncio.gather(*tasks))

    try:
        results = asyncio.run(run())
    finally:
        batcher.close()
    assert [sorted(b) for b in batches] == [[256] * 3, [512] * 3, [1024]], batches  # fullest first, one class each
    assert len(batches) <= MAX_PASSED + 1
    for windows, got in zip(requests, results, strict=True):
        assert got == [fast.transcribe_windows([w], None)[0] for w in windows]
    assert fast.length_class(1023 * 160) == 1024 and fast.length_class(1024 * 160) > 1024  # too long: its own


def test_a_batch_of_two_classes_runs_as_one_replay_when_that_costs_less(tiny: Path) -> None:
    """With timed replays, a batch the window batcher filled with shorter windows is padded to its longest
    class and run as one replay (the shorter windows' words unchanged); when one replay per class costs less,
    it is split by class as before. Untimed (no full warm-up), it is always split."""
    from asr.offline.engine_factory import make_engine
    from asr.offline.parakeet_fast import cheapest_groups
    from testkit.offline_audio import speech_track

    fast = make_engine(EngineSpec(engine="parakeet", model=str(tiny), device="cpu", parakeet_backend="fast",
                                  profiles="a=4x256,b2=2x1024,b=4x1024"))
    audio, _ = speech_track(20, seed=8)
    windows = [audio[0:64000], audio[64000:112000], audio[112000:144000], audio[150000:170000]]  # 4, 3, 2, 1.25 s
    lengths = [len(w) for w in windows]
    groups = [[3, 2], [0, 1]]  # by class: a (2.5 s) then b (10.2 s)
    profiles = fast.transcriber.profiles
    assert cheapest_groups(lengths, groups, profiles, {}) == groups
    merged = cheapest_groups(lengths, groups, profiles, {(256, 4): 0.010, (1024, 2): 0.012, (1024, 4): 0.016})
    assert merged == [[0, 1, 2, 3]]
    assert cheapest_groups(lengths, groups, profiles, {(256, 4): 0.004, (1024, 2): 0.008, (1024, 4): 0.030}) == groups

    calls: list[int] = []
    inner = fast.transcriber.transcribe

    def counting(batches):  # type: ignore[no-untyped-def]
        batches = list(batches)
        calls.append(len(batches))
        return inner(batches)

    alone = [fast.transcribe_windows([w], None)[0] for w in windows]
    fast.transcriber.transcribe = counting
    fast.replay_s = {(256, 4): 0.010, (1024, 2): 0.012, (1024, 4): 0.016}
    assert fast.transcribe_windows(windows, None) == alone and calls == [1]
    fast.replay_s = {(256, 4): 0.004, (1024, 2): 0.008, (1024, 4): 0.030}
    assert fast.transcribe_windows(windows, None) == alone and calls == [1, 2]
