"""Pack short windows of many requests into one fixed-length engine input, and split back.

Whisper encodes 30 s whatever it is given: a 10 s window pays for 30. When an engine has a
fixed input length (``fixed_window_s``), the batcher packs several windows (of any request)
into one input, separated by ``GAP_S`` of silence, first-fit by decreasing length, and each
word goes back to the window its centre falls in (the nearest one when it falls in a gap).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from asr.offline.results import Word

GAP_S = 0.5


@dataclass
class Pack:
    """One engine input: members ``(index, offset in samples)`` back to back with gaps."""

    capacity: int
    members: list[tuple[int, int]] = field(default_factory=list)
    used: int = 0

    def fits(self, length: int, gap: int) -> bool:
        return self.used + (gap if self.members else 0) + length <= self.capacity

    def add(self, index: int, length: int, gap: int) -> None:
        offset = self.used + (gap if self.members else 0)
        self.members.append((index, offset))
        self.used = offset + length


def pack(lengths: Sequence[int], capacity: int, max_packs: int, gap: int, first: int | None = None) -> list[Pack]:
    """First-fit decreasing into at most ``max_packs`` packs; ``first`` (an index) always goes in.

    Windows that do not fit are left out (they wait for a later batch).
    """
    packs: list[Pack] = []
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    if first is not None:
        order.remove(first)
        order.insert(0, first)
    for i in order:
        home = next((p for p in packs if p.fits(lengths[i], gap)), None)
        if home is None and len(packs) < max_packs:
            home = Pack(capacity)
            packs.append(home)
        if home is not None:
            home.add(i, lengths[i], gap)
    return packs


def packed_audio(p: Pack, windows: Sequence[np.ndarray]) -> np.ndarray:
    out = np.zeros(p.used, np.float32)
    for i, offset in p.members:
        out[offset:offset + len(windows[i])] = windows[i]
    return out


def split_words(p: Pack, lengths: Sequence[int], words: list[Word], rate: int) -> dict[int, list[Word]]:
    """Each word back to its member window, on that window's clock."""
    spans = [(i, off / rate, (off + lengths[i]) / rate) for i, off in p.members]
    out: dict[int, list[Word]] = {i: [] for i, _ in p.members}
    for w in words:
        c = w.center
        i, start, end = min(spans, key=lambda s: 0.0 if s[1] <= c < s[2] else min(abs(c - s[1]), abs(c - s[2])))
        dur = lengths[i] / rate
        out[i].append(Word(min(max(w.start - start, 0.0), dur), min(max(w.end - start, 0.0), dur), w.text))
    return out


def run_packs(engine: Any, packs: list[Pack], windows: Sequence[np.ndarray], language: str | None,
              results: list[list[Word]]) -> None:
    """One engine call over ``packs``; each member's words land in ``results[index]``."""
    lengths = [len(w) for w in windows]
    inputs = [packed_audio(p, windows) for p in packs]
    for p, words in zip(packs, engine.transcribe_windows(inputs, language), strict=True):
        for i, ws in split_words(p, lengths, words, engine.sample_rate).items():
            results[i] = ws


def transcribe_packed(engine: Any, windows: Sequence[np.ndarray], language: str | None) -> list[list[Word]]:
    """All ``windows`` through a fixed-length engine, packed, ``engine.max_batch`` inputs a call."""
    results: list[list[Word]] = [[] for _ in windows]
    remaining = list(range(len(windows)))
    capacity = int(engine.fixed_window_s * engine.sample_rate)
    gap = int(GAP_S * engine.sample_rate)
    while remaining:
        sub = [windows[i] for i in remaining]
        packs = pack([len(w) for w in sub], capacity, engine.max_batch, gap)
        sub_results: list[list[Word]] = [[] for _ in sub]
        run_packs(engine, packs, sub, language, sub_results)
        done = {i for p in packs for i, _ in p.members}
        for i in done:
            results[remaining[i]] = sub_results[i]
        remaining = [r for k, r in enumerate(remaining) if k not in done]
    return results
