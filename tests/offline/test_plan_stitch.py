"""Window planning (silence skipped, long speech cut at quiet points) and stitching words back."""

from __future__ import annotations

import numpy as np

from asr.offline.formats import render, to_srt, to_vtt
from asr.offline.plan import Piece, PlanOptions, Window, plan_windows
from asr.offline.results import Word
from asr.offline.stitch import build_transcript, group_segments, place_words

RATE = 16000


def noise(seconds: float, level: float = 0.1, seed: int = 0) -> np.ndarray:
    return (np.random.default_rng(seed).standard_normal(int(seconds * RATE)) * level).astype(np.float32)


def test_silence_gives_no_windows() -> None:
    assert plan_windows(np.zeros(RATE * 60, np.float32), RATE) == []
    quiet = noise(60, level=10 ** (-65 / 20))  # room tone below the gate
    assert plan_windows(quiet, RATE) == []


def test_bursts_in_silence_are_packed_without_the_silence() -> None:
    audio = np.zeros(RATE * 600, np.float32)
    at = [20, 140, 300, 420, 590]
    for i, t in enumerate(at):
        audio[t * RATE:(t + 2) * RATE] = noise(2, seed=i)
    windows = plan_windows(audio, RATE)
    assert len(windows) == 1 and len(windows[0].pieces) == 5
    for piece, t in zip(windows[0].pieces, at, strict=True):
        assert abs(piece.start / RATE - (t - 0.3)) < 0.03 and abs(piece.stop / RATE - (t + 2.3)) < 0.03
        assert (piece.own_start, piece.own_stop) == (piece.start, piece.stop)
    assert windows[0].length < 15 * RATE


def test_long_speech_is_cut_at_quiet_points_with_overlap() -> None:
    opts = PlanOptions(max_window_s=30.0, overlap_s=1.0, search_s=5.0)
    audio = noise(100)
    dips = [27.0, 53.0, 78.5]  # quieter (still above the gate) stretches the cutter should find
    for d in dips:
        audio[int(d * RATE):int((d + 0.1) * RATE)] *= 0.01
    pieces = [p for w in plan_windows(audio, RATE, opts) for p in w.pieces]
    assert all(p.length <= 30 * RATE for p in pieces)
    # Owned spans tile the audio exactly; each cut sits in a dip; neighbours share 2 s around it.
    assert pieces[0].own_start == 0 and pieces[-1].own_stop == len(audio)
    for a, b in zip(pieces, pieces[1:], strict=False):
        assert a.own_stop == b.own_start
        cut = a.own_stop / RATE
        assert any(d <= cut <= d + 0.1 for d in dips), cut
        assert a.stop - b.start == 2 * RATE


def test_overlapping_words_are_kept_once_on_the_file_clock() -> None:
    rate = RATE
    first = Window((Piece(0, 31 * rate, 0, 30 * rate),))
    second = Window((Piece(29 * rate, 50 * rate, 30 * rate, 50 * rate),))
    # "hello" centred at 29.6 s is heard by both windows; "world" at 30.5 s too.
    a = place_words(first, [Word(29.4, 29.8, " hello"), Word(30.3, 30.7, " world")], rate)
    b = place_words(second, [Word(0.4, 0.8, " hello"), Word(1.3, 1.7, " world"), Word(5.0, 5.5, " again")], rate)
    words = a + b
    assert [w.text for w in words] == [" hello", " world", " again"]
    assert [round(w.start, 3) for w in words] == [29.4, 30.3, 34.0]


def test_packed_pieces_map_back_to_their_own_time() -> None:
    rate = RATE
    window = Window((Piece(10 * rate, 12 * rate, 10 * rate, 12 * rate),
                     Piece(500 * rate, 503 * rate, 500 * rate, 503 * rate)))
    words = place_words(window, [Word(0.5, 1.0, " one"), Word(2.5, 3.0, " two")], rate)
    assert [(w.start, w.end) for w in words] == [(10.5, 11.0), (500.5, 501.0)]


def test_segments_split_on_pauses_and_sentences() -> None:
    words = [Word(0.0, 0.4, " Hello"), Word(0.5, 1.2, " there."), Word(1.3, 1.6, " How"),
             Word(1.7, 2.0, " are"), Word(4.0, 4.5, " you?")]
    segs = group_segments(words)
    assert [s.text for s in segs] == ["Hello there.", "How are", "you?"]
    t = build_transcript(words, 5.0, "en")
    assert t.text == "Hello there. How are you?" and t.segments[2].start == 4.0


def test_subtitle_clocks_past_an_hour() -> None:
    t = build_transcript([Word(3 * 3600 + 62.3456, 3 * 3600 + 64.0, " late")], 3 * 3600 + 70.0, "en")
    assert to_srt(t) == "1\n03:01:02,346 --> 03:01:04,000\nlate\n\n"
    assert to_vtt(t) == "WEBVTT\n\n03:01:02.346 --> 03:01:04.000\nlate\n"
    body, ctype = render(t, "verbose_json", words=True)
    assert ctype == "application/json" and '"word": "late"' in body and '"language": "english"' in body


def test_the_plan_stream_gives_plan_windows_as_the_audio_arrives() -> None:
    """Fed in ranges of any size (a decode, range by range), ``PlanStream`` returns exactly
    ``plan_windows``'s windows, most of them before the end: bursts, gaps just over and under the
    merge distance, speech longer than a window, a sound running into the end."""
    from asr.offline.plan import BLOCK_FRAMES, PlanStream

    rng = np.random.default_rng(7)
    audio = np.zeros(int(RATE * 400.3), np.float32)
    t = 1.0
    while t < 395:
        length = float(rng.choice([0.05, 0.5, 3.0, 12.0, 45.0]))
        a = int(t * RATE)
        b = min(len(audio), a + int(length * RATE))
        audio[a:b] = noise(length, seed=int(t))[: b - a]
        t += length + float(rng.choice([0.55, 0.65, 2.0, 40.0]))  # 0.6 s: twice the padding
    audio[-RATE:] = noise(1, seed=99)
    want = plan_windows(audio, RATE)
    block = BLOCK_FRAMES * int(RATE * 0.02)
    for steps in ([len(audio)], [block - 7, block + 3, 3 * block], list(rng.integers(1, 40 * RATE, 30))):
        stream, got, n, early = PlanStream(RATE), [], 0, 0
        for step in steps:
            n = min(len(audio), n + int(step))
            got += stream.feed(audio, n)
            if n == len(audio):
                break
        got += stream.feed(audio, len(audio))  # all of it known, the end not yet told
        early = len(got)
        got += stream.finish(audio)
        assert got == want
        if len(steps) > 1:
            assert early >= len(want) // 2, (early, len(want))
    assert len(want) >= 8 and sum(len(w.pieces) for w in want) > len(want)  # packed and cut windows
