"""Offline files: decoding with PyAV, window planning, seam stitching, and the CLI."""

from __future__ import annotations

import json
import random
import wave
from pathlib import Path

import numpy as np
import pytest
from asr.parakeet.transcribe import TranscribeOptions, load_audio, plan_windows, stitch_words

from asr.parakeet.tiny import synthetic_speech
from asr.parakeet.tokenizer import Word


def _truth(seconds: float, seed: int, continuous: bool = False) -> list[Word]:
    rng = random.Random(seed)
    words, t, i = [], 0.1, 0
    while True:
        length = rng.uniform(0.15, 0.6)
        if t + length > seconds - 0.1:
            return words
        words.append(Word(f"w{i}", round(t, 3), round(t + length, 3)))
        t += length + (0.0 if continuous else rng.choice([0.02, 0.08, 0.3]))
        i += 1


def _heard(truth: list[Word], start: float, stop: float, rng: random.Random) -> list[Word]:
    """What a window hears: whole words inside it (times jittered), and garbage for cut-off words."""
    out = []
    for w in truth:
        if start <= w.start and w.end <= stop:
            j = rng.uniform(-0.04, 0.04)
            out.append(Word(w.text, w.start + j, w.end + j))
        elif w.start < stop and w.end > start:  # cut by the window edge
            out.append(Word(w.text + "~", max(w.start, start), min(w.end, stop)))
    return out


@pytest.mark.parametrize("continuous", [False, True])
@pytest.mark.parametrize("seed", range(6))
def test_stitching_keeps_every_word_once(seed, continuous):
    truth = _truth(60.0, seed, continuous)
    options = TranscribeOptions(window_s=10.0, overlap_s=3.0)
    rng = random.Random(100 + seed)
    windows = [(lo / 16000, hi / 16000) for lo, hi in plan_windows(60 * 16000, 16000, options)]
    stitched = stitch_words([(a, b, _heard(truth, a, b, rng)) for a, b in windows])
    assert [w.text for w in stitched] == [w.text for w in truth]
    for w, t in zip(stitched, truth, strict=True):
        assert abs(w.start - t.start) <= 0.04 + 1e-9


def test_plan_covers_the_file_with_overlaps():
    options = TranscribeOptions(window_s=4.0, overlap_s=1.0)
    plan = plan_windows(16000 * 10 + 123, 16000, options)
    assert plan[0][0] == 0 and plan[-1][1] == 16000 * 10 + 123
    for (_a0, a1), (b0, b1) in zip(plan, plan[1:], strict=False):
        assert a1 - b0 == 16000 and b1 - b0 <= 4 * 16000
    assert plan_windows(16000 * 3, 16000, options) == [(0, 48000)]
    with pytest.raises(ValueError):
        TranscribeOptions(window_s=4.0, overlap_s=2.5)


def _write_wav(path: Path, audio: np.ndarray, rate: int) -> Path:
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes((np.clip(audio, -1, 1) * 32767).astype(np.int16).tobytes())
    return path


def _write_flac(path: Path, audio: np.ndarray, rate: int) -> Path:
    import av

    with av.open(str(path), "w") as out:
        stream = out.add_stream("flac", rate=rate, layout="stereo")
        stereo = np.stack([audio, audio]).astype(np.float32)
        pcm = (np.clip(stereo, -1, 1) * 32767).astype(np.int16)
        frame = av.AudioFrame.from_ndarray(pcm.T.reshape(1, -1), format="s16", layout="stereo")
        frame.sample_rate = rate
        for packet in stream.encode(frame):
            out.mux(packet)
        for packet in stream.encode(None):
            out.mux(packet)
    return path


def test_load_audio_any_format_resampled_to_mono_16k(tmp_path):
    clip = synthetic_speech(1.5, seed=3, sample_rate=8000)
    wav = load_audio(_write_wav(tmp_path / "a.wav", clip, 8000))
    import soxr

    flac = load_audio(_write_flac(tmp_path / "a.flac", soxr.resample(clip, 8000, 44100), 44100))
    assert abs(len(wav) - 24000) <= 64 and abs(len(flac) - 24000) <= 64
    assert wav.dtype == np.float32 and 0.01 < np.abs(wav).max() <= 1.0
    with pytest.raises(FileNotFoundError):
        load_audio(tmp_path / "missing.wav")
    (tmp_path / "junk.mp3").write_bytes(b"no audio here" * 50)
    with pytest.raises(ValueError):
        load_audio(tmp_path / "junk.mp3")


@pytest.fixture(scope="module")
def engine(tiny_dir):
    from asr.parakeet.engine import ParakeetEngine

    return ParakeetEngine.from_pretrained(tiny_dir)


def test_long_file_seams_on_the_tiny_model(engine, tmp_path):
    from asr.parakeet.transcribe import transcribe_files

    audio = np.concatenate([synthetic_speech(4.0, seed=s) for s in range(3)])  # 12 s
    path = _write_wav(tmp_path / "long.wav", audio, 16000)
    options = TranscribeOptions(window_s=4.0, overlap_s=1.0, batch_size=3)
    (result,) = transcribe_files(engine, [path], options, progress=False)
    assert result.words and abs(result.duration_s - 12.0) < 0.01
    starts = [w.start for w in result.words]
    assert starts == sorted(starts) and result.words[-1].end <= 12.0 + 0.08
    heard = load_audio(path)
    plan = plan_windows(len(heard), 16000, options)
    per_window = [engine.transcribe([heard[lo:hi]])[0].words for lo, hi in plan]
    for k, (lo, hi) in enumerate(plan):  # words away from any seam are that window's words, unchanged
        lo_s, hi_s = lo / 16000, hi / 16000
        inner_lo = lo_s + (options.overlap_s if k else 0)
        inner_hi = hi_s - (options.overlap_s if k + 1 < len(plan) else 0)
        own = [(w.text, round(w.start + lo_s, 3)) for w in per_window[k] if inner_lo <= w.start + lo_s
               and w.end + lo_s <= inner_hi]
        got = [(w.text, round(w.start, 3)) for w in result.words if inner_lo <= w.start and w.end <= inner_hi]
        assert got == own, f"window {k}"
    for a, b in zip(result.words, result.words[1:], strict=False):  # nothing doubled at a seam
        assert not (a.text == b.text and min(a.end, b.end) - max(a.start, b.start) > 0)


def test_cli_transcribe_and_convert(tiny_dir, tiny_nemo, tmp_path, capsys):
    from agent.cli import main

    path = _write_wav(tmp_path / "short.wav", synthetic_speech(2.0, seed=5), 16000)
    assert main(["transcribe", str(path), "--model", str(tiny_dir), "--format", "json", "--no-progress"]) == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert out["file"] == str(path) and out["words"] and out["text"] == " ".join(w["text"] for w in out["words"])
    assert main(["asr", "convert", str(tiny_nemo), str(tmp_path / "conv")]) == 0
    assert (tmp_path / "conv" / "model.safetensors").is_file()
    assert main(["transcribe", str(path), "--model", str(tmp_path / "conv"), "--no-progress",
                 "--output-dir", str(tmp_path / "out")]) == 0
    assert (tmp_path / "out" / "short.wav.txt").read_text().strip() == out["text"]
