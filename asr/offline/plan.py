"""Cut a file into engine windows: skip silence, split long speech at quiet points, pack.

A cheap energy gate (RMS per 20 ms frame, numpy) finds the voiced regions, so hours of
silence cost milliseconds and never reach the model. A region longer than the window is
split at its quietest frame near the limit, with ``overlap_s`` of audio shared on each side
of the cut; the cut itself decides which piece owns a word (``stitch`` keeps a word in the
piece whose owned span holds its centre). Consecutive pieces are then packed into one
window up to ``max_window_s`` of audio, silence between them left out, so a window never
pays for dead air (Whisper encodes 30 s whatever it is given).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

FRAME_S = 0.02


@dataclass(frozen=True)
class PlanOptions:
    max_window_s: float = 30.0
    overlap_s: float = 1.0  # shared audio on each side of a cut inside continuous speech
    search_s: float = 5.0  # how far back from the limit to look for the quietest cut
    silence_db: float = -50.0  # frames with RMS below this (dBFS) are silence
    pad_s: float = 0.3  # kept around each voiced stretch
    min_voiced_s: float = 0.1  # shorter blips (clicks) are dropped

    def __post_init__(self) -> None:
        if self.max_window_s <= 2 * self.overlap_s + self.search_s:
            raise ValueError("max_window_s must exceed 2 * overlap_s + search_s")


def plan_options(window_s: float, overlap_s: float | None = None) -> PlanOptions:
    """Options for windows of at most ``window_s`` where two pieces cut inside speech share ``overlap_s``.

    ``overlap_s`` is the whole shared stretch (``overlap_s / 2`` each side of the cut; None keeps
    the default 1 s each side); the search for a quiet cut shrinks to fit short windows.
    """
    if overlap_s is None:
        return PlanOptions(max_window_s=window_s)
    if window_s <= 0 or not 0 <= overlap_s < window_s / 2:
        raise ValueError(f"need window_s > 0 and 0 <= overlap_s < window_s / 2 (got {window_s:g} s, {overlap_s:g} s)")
    search_s = min(PlanOptions.search_s, (window_s - overlap_s) / 2)
    return PlanOptions(max_window_s=window_s, overlap_s=overlap_s / 2, search_s=search_s)


@dataclass(frozen=True)
class Piece:
    """Samples ``[start, stop)`` of the file; the piece owns words centred in ``[own_start, own_stop)``."""

    start: int
    stop: int
    own_start: int
    own_stop: int

    @property
    def length(self) -> int:
        return self.stop - self.start


@dataclass(frozen=True)
class Window:
    """Pieces played back to back: what one engine call sees."""

    pieces: tuple[Piece, ...]

    @property
    def length(self) -> int:
        return sum(p.length for p in self.pieces)

    def audio(self, samples: np.ndarray) -> np.ndarray:
        if len(self.pieces) == 1:
            p = self.pieces[0]
            return samples[p.start:p.stop]
        return np.concatenate([samples[p.start:p.stop] for p in self.pieces])


BLOCK_FRAMES = 1024  # frame_db sums power in blocks at multiples of this from its first frame


def frame_db(audio: np.ndarray, frame: int) -> np.ndarray:
    """RMS level of each whole frame in dBFS (the tail shorter than a frame is its own frame).

    Frames are summed in blocks of ``BLOCK_FRAMES``, so a prefix of whole blocks gives the same
    levels alone as inside the whole (what ``PlanStream`` relies on).
    """
    n = len(audio) // frame
    parts = []
    for a in range(0, n, BLOCK_FRAMES):
        b = min(n, a + BLOCK_FRAMES)
        body = audio[a * frame:b * frame].reshape(b - a, frame)
        parts.append(np.einsum("ij,ij->i", body, body, dtype=np.float64))
    power = (np.concatenate(parts) if parts else np.zeros(0, np.float64)) / frame
    if len(audio) > n * frame:
        tail = audio[n * frame:]
        power = np.append(power, float(np.dot(tail, tail)) / len(tail))
    return 10.0 * np.log10(power + 1e-12)


def voiced_regions(audio: np.ndarray, rate: int, opts: PlanOptions) -> list[tuple[int, int]]:
    """Sample ranges with sound above ``silence_db``, padded and merged."""
    frame = int(rate * FRAME_S)
    return _regions(frame_db(audio, frame) > opts.silence_db, frame, len(audio), rate, opts)


def _regions(loud: np.ndarray, frame: int, length: int, rate: int, opts: PlanOptions,
             first: int = 0) -> list[tuple[int, int]]:
    """``voiced_regions`` from each frame's loudness (``loud[0]`` is frame ``first``; ``length``: the
    samples of the whole file known)."""
    if not loud.any():
        return []
    edges = np.flatnonzero(np.diff(np.concatenate(([0], loud.view(np.int8), [0])))) + first
    starts, stops = edges[0::2], edges[1::2]
    min_frames = max(1, int(round(opts.min_voiced_s / FRAME_S)))
    keep = (stops - starts) >= min_frames
    pad = int(opts.pad_s * rate)
    regions: list[tuple[int, int]] = []
    for a, b in zip(starts[keep] * frame, stops[keep] * frame, strict=True):
        a, b = max(0, int(a) - pad), min(length, int(b) + pad)
        if regions and a <= regions[-1][1]:
            regions[-1] = (regions[-1][0], b)
        else:
            regions.append((a, b))
    return regions


def split_region(audio: np.ndarray, rate: int, start: int, stop: int, opts: PlanOptions) -> list[Piece]:
    """Split ``[start, stop)`` into pieces of at most ``max_window_s`` at quiet frames."""
    max_len = int(opts.max_window_s * rate)
    ov = int(opts.overlap_s * rate)
    frame = int(rate * FRAME_S)
    pieces: list[Piece] = []
    own_start, lo = start, start
    while stop - lo > max_len:
        # The piece [lo, cut + ov) must fit: cut <= lo + max_len - ov; search back from there.
        hi_cut = lo + max_len - ov
        lo_cut = max(own_start + frame, hi_cut - int(opts.search_s * rate))
        levels = frame_db(audio[lo_cut:hi_cut], frame)
        cut = lo_cut + int(np.argmin(levels)) * frame + frame // 2
        pieces.append(Piece(lo, min(stop, cut + ov), own_start, cut))
        own_start, lo = cut, cut - ov
    pieces.append(Piece(lo, stop, own_start, stop))
    return pieces


def plan_windows(audio: np.ndarray, rate: int, opts: PlanOptions | None = None) -> list[Window]:
    """Every voiced sample of ``audio`` in windows of at most ``max_window_s`` seconds."""
    opts = opts or PlanOptions()
    max_len = int(opts.max_window_s * rate)
    windows: list[Window] = []
    current: list[Piece] = []
    for a, b in voiced_regions(audio, rate, opts):
        for piece in split_region(audio, rate, a, b, opts):
            if current and sum(p.length for p in current) + piece.length > max_len:
                windows.append(Window(tuple(current)))
                current = []
            current.append(piece)
    if current:
        windows.append(Window(tuple(current)))
    return windows


class PlanStream:
    """``plan_windows`` on audio that arrives in order: each window as soon as it is final.

    ``feed(audio, n)`` is given the buffer with its first ``n`` samples known and returns the windows
    no later sample can change; ``finish(audio)`` (the whole audio) returns the rest. Together they
    are exactly ``plan_windows(audio)``: the same frames (scored in whole blocks), a voiced region only
    once no later sound can merge into it (the next run starts more than twice the padding after
    it), and a window only once the next piece does not fit it.
    """

    def __init__(self, rate: int, opts: PlanOptions | None = None) -> None:
        self.rate, self.opts = rate, opts or PlanOptions()
        self.frame = int(rate * FRAME_S)
        self.pad = int(self.opts.pad_s * rate)
        self.max_len = int(self.opts.max_window_s * rate)
        self._loud: list[np.ndarray] = []
        self._frames = 0  # frames scored (whole blocks)
        self._base = 0  # frames before this belong to regions already split into pieces
        self._current: list[Piece] = []

    def feed(self, audio: np.ndarray, n: int) -> list[Window]:
        block = BLOCK_FRAMES * self.frame
        upto = n // block * BLOCK_FRAMES  # whole blocks known
        if upto > self._frames:
            levels = frame_db(audio[self._frames * self.frame:upto * self.frame], self.frame)
            self._loud.append(levels > self.opts.silence_db)
            self._frames = upto
        if not self._loud:
            return []
        loud = np.concatenate(self._loud) if len(self._loud) > 1 else self._loud[0]
        self._loud = [loud]
        # A run still open at the end may go on; later runs start no earlier than the open one.
        tail = loud[self._base:]
        closed = len(loud)
        if len(tail) and tail[-1]:
            quiet = np.flatnonzero(~tail)
            closed = self._base + (int(quiet[-1]) + 1 if len(quiet) else 0)
        regions = _regions(loud[self._base:closed], self.frame, closed * self.frame, self.rate, self.opts,
                           self._base)
        final = [r for r in regions if r[1] < closed * self.frame - self.pad]
        if final:  # the next region starts after the last run of the last final one
            self._base = (final[-1][1] - self.pad) // self.frame
        return self._pieces(audio, final)

    def finish(self, audio: np.ndarray) -> list[Window]:
        rest = frame_db(audio[self._frames * self.frame:], self.frame) > self.opts.silence_db
        loud = np.concatenate([*self._loud, rest])
        windows = self._pieces(audio, _regions(loud[self._base:], self.frame, len(audio), self.rate, self.opts,
                                               self._base))
        if self._current:
            windows.append(Window(tuple(self._current)))
            self._current = []
        return windows

    def _pieces(self, audio: np.ndarray, regions: list[tuple[int, int]]) -> list[Window]:
        windows: list[Window] = []
        for a, b in regions:
            for piece in split_region(audio, self.rate, a, b, self.opts):
                if self._current and sum(p.length for p in self._current) + piece.length > self.max_len:
                    windows.append(Window(tuple(self._current)))
                    self._current = []
                self._current.append(piece)
        return windows
