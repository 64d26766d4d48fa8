"""``cadence transcribe`` on the one offline stack: decode, window plan, seam stitching, and the CLI.

The planner and stitcher are ``asr.offline``'s (the server's and the Ray job's); these tests drive
them with the CLI's ``--window-s`` / ``--overlap-s`` mapping (``plan_options``).
"""

from __future__ import annotations

import json
import random

import numpy as np
import pytest

from asr.offline.decode import decode_file
from asr.offline.plan import Window, plan_options, plan_windows
from asr.offline.stitch import place_words
from asr.parakeet.tiny import synthetic_speech
from asr.words import Word
from testkit.offline_audio import write_audio
from transports.audio_io import AudioFileError

RATE = 16000


def _truth(seconds: float, seed: int, continuous: bool = False) -> list[Word]:
    rng = random.Random(seed)
    words, t, i = [], 0.1, 0
    while True:
        length = rng.uniform(0.15, 0.6)
        if t + length > seconds - 0.1:
            return words
        words.append(Word(round(t, 3), round(t + length, 3), f" w{i}"))
        t += length + (0.0 if continuous else rng.choice([0.02, 0.08, 0.3]))
        i += 1


def _audio(truth: list[Word], seconds: float, seed: int) -> np.ndarray:
    """Loud noise under each word, a quieter floor (still over the silence gate) between words."""
    rng = np.random.default_rng(seed)
    audio = (rng.standard_normal(int(seconds * RATE)) * 10 ** (-44 / 20)).astype(np.float32)
    for w in truth:
        a, b = int(w.start * RATE), int(w.end * RATE)
        audio[a:b] = rng.standard_normal(b - a) * 0.1
    return audio


def _heard(truth: list[Word], window: Window, jitter: dict[tuple[int, int], float]) -> list[Word]:
    """What a window hears, on its own clock: whole words inside a piece (times jittered per hearing),
    and garbage for words a piece edge cuts."""
    out, base = [], 0.0
    for piece in window.pieces:
        start, stop = piece.start / RATE, piece.stop / RATE
        for k, w in enumerate(truth):
            if start <= w.start and w.end <= stop:
                j = jitter.setdefault((k, piece.start), random.Random(k * 7919 + piece.start).uniform(-0.04, 0.04))
                out.append(Word(w.start - start + base + j, w.end - start + base + j, w.text))
            elif w.start < stop and w.end > start:
                out.append(Word(max(w.start, start) - start + base, min(w.end, stop) - start + base, w.text + "~"))
        base += piece.length / RATE
    return out


@pytest.mark.parametrize("seed", range(6))
def test_stitching_keeps_every_word_once(seed):
    """Speech with pauses: every cut lands in a pause, each word comes back once, from one window."""
    truth = _truth(60.0, seed)
    audio = _audio(truth, 60.0, seed)
    windows = plan_windows(audio, RATE, plan_options(10.0, 3.0))
    assert len(windows) >= 6
    jitter: dict[tuple[int, int], float] = {}
    stitched = sorted((w for win in windows for w in place_words(win, _heard(truth, win, jitter), RATE)),
                      key=lambda w: w.start)
    assert [w.text for w in stitched] == [w.text for w in truth]
    for w, t in zip(stitched, truth, strict=True):
        assert abs(w.start - t.start) <= 0.04 + 1e-6


@pytest.mark.parametrize("seed", range(6))
def test_stitching_continuous_speech_without_pauses(seed):
    """No pause to cut in: the cut falls inside a word that both windows hear whole; a word both
    windows time alike is kept once (by its centre), never lost."""
    truth = _truth(60.0, seed, continuous=True)
    audio = _audio(truth, 60.0, seed)
    windows = plan_windows(audio, RATE, plan_options(10.0, 3.0))
    heard_alike = {}  # each word timed the same by every window that hears it whole
    jitter = {(k, p.start): heard_alike.setdefault(k, random.Random(k).uniform(-0.04, 0.04))
              for win in windows for p in win.pieces for k in range(len(truth))}
    stitched = sorted((w for win in windows for w in place_words(win, _heard(truth, win, jitter), RATE)),
                      key=lambda w: w.start)
    assert [w.text for w in stitched] == [w.text for w in truth]


def test_plan_covers_the_file_with_overlaps():
    audio = np.random.default_rng(0).standard_normal(RATE * 10 + 123).astype(np.float32) * 0.1
    options = plan_options(4.0, 1.0)
    pieces = [p for w in plan_windows(audio, RATE, options) for p in w.pieces]
    assert pieces[0].start == pieces[0].own_start == 0 and pieces[-1].stop == pieces[-1].own_stop == len(audio)
    for a, b in zip(pieces, pieces[1:], strict=False):
        assert a.own_stop == b.own_start and a.stop - b.start == RATE  # --overlap-s 1: 1 s shared
    assert all(p.length <= 4 * RATE for p in pieces)
    (short,) = plan_windows(audio[: 3 * RATE], RATE, options)
    assert [(p.start, p.stop) for p in short.pieces] == [(0, 3 * RATE)]
    with pytest.raises(ValueError):
        plan_options(4.0, 2.5)


def test_decode_any_format_resampled_to_mono_16k(tmp_path):
    """One loader: libsndfile for WAV/FLAC (stereo mixed down), PyAV for containers it cannot open (M4A)."""
    import soxr

    clip = synthetic_speech(1.5, seed=3, sample_rate=8000)
    wav = decode_file(write_audio(tmp_path / "a.wav", clip, 8000))
    at44k = soxr.resample(clip, 8000, 44100)
    flac = decode_file(write_audio(tmp_path / "a.flac", np.stack([at44k, at44k], axis=1), 44100))
    m4a = decode_file(write_audio(tmp_path / "a.m4a", at44k, 44100))
    assert abs(len(wav) - 24000) <= 64 and abs(len(flac) - 24000) <= 64
    assert abs(len(m4a) - 24000) <= 2048  # AAC adds priming frames
    assert wav.dtype == np.float32 and 0.01 < np.abs(wav).max() <= 1.0
    assert float(np.corrcoef(wav, flac[: len(wav)])[0, 1]) > 0.95
    with pytest.raises(AudioFileError):
        decode_file(tmp_path / "missing.wav")
    (tmp_path / "junk.mp3").write_bytes(b"no audio here" * 50)
    with pytest.raises(AudioFileError):
        decode_file(tmp_path / "junk.mp3")


def _engine(tiny_dir, window_s: float, overlap_s: float, max_batch: int = 3):
    from asr.offline.engine_factory import make_engine
    from asr.offline.window_engine import EngineSpec

    return make_engine(EngineSpec(engine="parakeet", model=str(tiny_dir), parakeet_backend="general",
                                  max_batch=max_batch, max_window_s=window_s, overlap_s=overlap_s))


def test_long_file_seams_on_the_tiny_model(tiny_dir, tmp_path):
    from asr.offline.transcriber import transcribe_corpus

    engine = _engine(tiny_dir, 4.0, 1.0)
    assert engine.plan == plan_options(4.0, 1.0)
    audio = np.concatenate([synthetic_speech(4.0, seed=s) for s in range(3)])  # 12 s
    heard = decode_file(write_audio(tmp_path / "long.wav", audio, RATE))
    (result,) = transcribe_corpus(engine, [heard], None)
    assert result.words and abs(result.duration - 12.0) < 0.01
    starts = [w.start for w in result.words]
    assert starts == sorted(starts) and result.words[-1].end <= 12.0 + 0.08
    windows = plan_windows(heard, RATE, engine.plan)
    assert len(windows) >= 3
    # Batched with other windows or alone, a window gives the same words; each lands on the file
    # clock once, in the piece that owns it.
    alone = [w for win in windows for w in place_words(win, engine.transcribe_windows([win.audio(heard)], None)[0],
                                                        RATE)]
    assert [(w.text, round(w.start, 3)) for w in result.words] == [(w.text, round(w.start, 3)) for w in alone]
    owner = {}  # each kept word -> the piece that owns its centre
    for piece in (p for win in windows for p in win.pieces):
        for w in result.words:
            if piece.own_start <= w.center * RATE < piece.own_stop:
                owner.setdefault(id(w), []).append(piece)
    assert all(len(owner.get(id(w), [])) == 1 for w in result.words)
    for a, b in zip(result.words, result.words[1:], strict=False):  # nothing doubled at a seam
        if a.text == b.text and min(a.end, b.end) - max(a.start, b.start) > 0:
            assert owner[id(a)] == owner[id(b)], (a, b)  # the random model's own repeat, inside one piece


def test_window_options_reach_the_plan_in_process_and_on_ray():
    """``--window-s`` / ``--overlap-s`` build the engine spec both paths use (``--ray`` ships it to the workers)."""
    from agent.cli import build_parser
    from agent.cli_transcribe import _transcribe_spec

    args = build_parser().parse_args(["transcribe", "x.wav", "--model", "m", "--window-s", "12", "--overlap-s", "2",
                                      "--batch-size", "5", "--ray"])
    spec = _transcribe_spec(args)
    assert (spec.model, spec.max_window_s, spec.overlap_s, spec.max_batch) == ("m", 12.0, 2.0, 5)
    bad = build_parser().parse_args(["transcribe", "x.wav", "--model", "m", "--window-s", "4", "--overlap-s", "3"])
    with pytest.raises(ValueError):
        _transcribe_spec(bad)


def test_cli_transcribe_and_convert(tiny_dir, tiny_nemo, tmp_path, capsys):
    from agent.cli import main

    path = write_audio(tmp_path / "short.wav", synthetic_speech(2.0, seed=5), RATE)
    assert main(["transcribe", str(path), "--model", str(tiny_dir), "--format", "json", "--no-progress"]) == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert out["file"] == str(path) and out["words"] and out["text"] == " ".join(w["text"] for w in out["words"])
    assert main(["asr", "convert", str(tiny_nemo), str(tmp_path / "conv")]) == 0
    assert (tmp_path / "conv" / "model.safetensors").is_file()
    assert main(["transcribe", str(path), "--model", str(tmp_path / "conv"), "--no-progress",
                 "--output-dir", str(tmp_path / "out")]) == 0
    assert (tmp_path / "out" / "short.wav.txt").read_text().strip() == out["text"]
    assert main(["transcribe", str(path), "--model", str(tiny_dir), "--window-s", "4", "--overlap-s", "3"]) == 2
    assert "overlap_s < window_s / 2" in capsys.readouterr().err


def test_cli_long_file_uses_the_window_options(tiny_dir, tmp_path, capsys):
    """The CLI's words for a 12 s file are the pipeline's with ``plan_options(--window-s, --overlap-s)``."""
    from agent.cli import main
    from asr.offline.transcriber import transcribe_corpus

    audio = np.concatenate([synthetic_speech(4.0, seed=s) for s in range(3)])
    path = write_audio(tmp_path / "long.wav", audio, RATE)
    assert main(["transcribe", str(path), "--model", str(tiny_dir), "--format", "json", "--no-progress",
                 "--window-s", "4", "--overlap-s", "1", "--batch-size", "3"]) == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    (want,) = transcribe_corpus(_engine(tiny_dir, 4.0, 1.0), [decode_file(path)], None)
    assert [(w["text"], w["start"]) for w in out["words"]] == [(w.text.strip(), round(w.start, 3)) for w in want.words]
    default = transcribe_corpus(_engine(tiny_dir, 30.0, 4.0), [decode_file(path)], None)[0]
    assert len(plan_windows(decode_file(path), RATE, plan_options(4.0, 1.0))) > len(
        plan_windows(decode_file(path), RATE, plan_options(30.0, 4.0))) and default.words
