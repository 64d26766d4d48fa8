"""Offline files: decode with PyAV, cut into overlapping windows, batch them, stitch the words back.

Windows of ``window_s`` overlap by ``overlap_s``. At each seam the cut goes in a pause of the
earlier window's words, near the middle of the overlap; words are taken from the earlier window
before the cut and from the later one after it (by word centre), and a word both windows placed
at the same time is kept once. Every word therefore comes from the window that heard it with
the most context on both sides.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from asr.parakeet._deps import require
from asr.parakeet.engine import ParakeetEngine
from asr.parakeet.tokenizer import Word


@dataclass(frozen=True)
class TranscribeOptions:
    window_s: float = 30.0
    overlap_s: float = 4.0
    batch_size: int = 8

    def __post_init__(self) -> None:
        if self.window_s <= 0 or not 0 <= self.overlap_s < self.window_s / 2:
            raise ValueError("need window_s > 0 and 0 <= overlap_s < window_s / 2")


@dataclass
class FileTranscript:
    path: str
    duration_s: float
    words: list[Word] = field(default_factory=list)

    @property
    def text(self) -> str:
        return " ".join(w.text for w in self.words)


def load_audio(path: str | Path, sample_rate: int = 16000) -> np.ndarray:
    """Any file PyAV reads, as mono float32 at ``sample_rate``."""
    av = require("av")
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no such audio file: {path}")
    chunks: list[np.ndarray] = []
    try:
        with av.open(str(path)) as container:
            if not container.streams.audio:
                raise ValueError(f"{path}: no audio stream")
            resampler = av.AudioResampler(format="flt", layout="mono", rate=sample_rate)
            for frame in container.decode(audio=0):
                for out in resampler.resample(frame):
                    chunks.append(out.to_ndarray().reshape(-1))
            for out in resampler.resample(None):
                chunks.append(out.to_ndarray().reshape(-1))
    except av.error.FFmpegError as exc:
        raise ValueError(f"{path}: cannot decode audio ({exc})") from None
    return np.concatenate(chunks).astype(np.float32) if chunks else np.zeros(0, dtype=np.float32)


def plan_windows(n_samples: int, sample_rate: int, options: TranscribeOptions) -> list[tuple[int, int]]:
    """``[start, stop)`` sample ranges covering the file, consecutive ones overlapping by ``overlap_s``."""
    window = int(options.window_s * sample_rate)
    overlap = int(options.overlap_s * sample_rate)
    if n_samples <= window:
        return [(0, n_samples)]
    step = window - overlap
    count = -(-(n_samples - overlap) // step)
    return [(i * step, min(n_samples, i * step + window)) for i in range(count)]


def _cut_time(words: Sequence[Word], lo: float, hi: float) -> float:
    """A time in ``[lo, hi]`` (the overlap) outside every word of ``words``, near its middle if possible."""
    mid = (lo + hi) / 2
    inner_lo, inner_hi = lo + (hi - lo) / 4, hi - (hi - lo) / 4
    gaps = [(a.end, b.start) for a, b in zip(words, words[1:], strict=False) if b.start > a.end]
    candidates = [(max(g0, inner_lo) + min(g1, inner_hi)) / 2 for g0, g1 in gaps
                  if g1 > inner_lo and g0 < inner_hi]
    if not any(w.start <= mid < w.end for w in words):
        candidates.append(mid)
    return min(candidates, key=lambda t: abs(t - mid)) if candidates else mid


def _same_word(a: Word, b: Word) -> bool:
    overlap = min(a.end, b.end) - max(a.start, b.start)
    return overlap > 0.5 * min(a.end - a.start, b.end - b.start) and a.text == b.text


def stitch_words(windows: Sequence[tuple[float, float, list[Word]]]) -> list[Word]:
    """Merge per-window words (file-time seconds) of windows ``(start_s, stop_s, words)`` in file order."""
    merged: list[Word] = []
    cut_from = float("-inf")
    for i, (_start, stop, words) in enumerate(windows):
        words = sorted(words, key=lambda w: w.start)
        if i + 1 < len(windows):
            next_start = windows[i + 1][0]
            cut_to = _cut_time(words, next_start, stop) if next_start < stop else stop
        else:
            cut_to = float("inf")
        for w in words:
            centre = (w.start + w.end) / 2
            if not cut_from <= centre < cut_to:
                continue
            if merged and _same_word(merged[-1], w):
                continue  # both windows placed this word at the seam
            merged.append(w)
        cut_from = cut_to
    return merged


def transcribe_files(
    engine: ParakeetEngine,
    paths: Sequence[str | Path],
    options: TranscribeOptions | None = None,
    progress: bool | Callable[[int], None] = True,
) -> list[FileTranscript]:
    """Transcribe files of any length: windows of all files batched together, words stitched per file."""
    options = options or TranscribeOptions()
    rate = engine.sample_rate
    audios = [load_audio(p, rate) for p in paths]
    plans = [plan_windows(len(a), rate, options) for a in audios]
    jobs = [(f, lo, hi) for f, plan in enumerate(plans) for lo, hi in plan]
    order = sorted(range(len(jobs)), key=lambda j: jobs[j][2] - jobs[j][1], reverse=True)
    words: dict[int, list[Word]] = {}
    bar = _progress(len(jobs), progress)
    for lo in range(0, len(order), options.batch_size):
        batch = order[lo : lo + options.batch_size]
        results = engine.transcribe([audios[jobs[j][0]][jobs[j][1] : jobs[j][2]] for j in batch],
                                    batch_size=options.batch_size)
        for j, result in zip(batch, results, strict=True):
            offset = jobs[j][1] / rate
            words[j] = [Word(w.text, w.start + offset, w.end + offset) for w in result.words]
        bar(len(batch))
    out = []
    for f, path in enumerate(paths):
        windows = [(lo / rate, hi / rate, words[j]) for j, (g, lo, hi) in enumerate(jobs) if g == f]
        out.append(FileTranscript(str(path), len(audios[f]) / rate, stitch_words(windows)))
    return out


def _progress(total: int, progress: bool | Callable[[int], None]) -> Callable[[int], None]:
    if callable(progress):
        return progress
    if not progress:
        return lambda n: None
    tqdm = require("tqdm").tqdm
    bar = tqdm(total=total, unit="window", desc="transcribe")

    def update(n: int) -> None:
        bar.update(n)
        if bar.n >= total:
            bar.close()

    return update
