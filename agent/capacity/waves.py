"""How bursty a level's turns were, and whether its slowest turns came in the bursts.

At 256 phone callers the turns of `cadence capacity`'s callers arrive in waves (runs 95-97: 2 s bins of 17-89
turns, about 12 s apart), and the slowest 5% of turns fall in the peak bins. A level's first-audio tail is then
a burst's queue, not a steady one; this readout puts that beside the percentiles.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any


def turn_waves(turns: Iterable[Mapping[str, Any]], bin_s: float = 2.0, tail: float = 0.05,
               peak: float = 1.5) -> dict[str, float]:
    """Turns per ``bin_s`` bin of the hold (by ``at_s``, a turn's end of speech): the busiest bin's rate against the
    mean over the bins the turns span (``peak_to_mean``), and the share of the slowest ``tail`` of answered turns
    (by ``first_audio_ms``) that fell in bins at least ``peak`` times the mean (``tail_in_peaks``). Empty: {}."""
    items = [t for t in turns if t.get("at_s") is not None]
    if not items:
        return {}
    bins = Counter(int(float(t["at_s"]) // bin_s) for t in items)
    span = max(bins) - min(bins) + 1
    mean = len(items) / span
    busiest = max(bins.values())
    out = {"bin_s": bin_s, "mean_per_bin": round(mean, 1), "peak_per_bin": float(busiest),
           "peak_to_mean": round(busiest / mean, 2)}
    answered = sorted((t for t in items if t.get("first_audio_ms") is not None), key=lambda t: t["first_audio_ms"])
    slowest = answered[int(len(answered) * (1 - tail)):] if answered else []
    if slowest:
        in_peaks = sum(bins[int(float(t["at_s"]) // bin_s)] >= peak * mean for t in slowest)
        out["tail_in_peaks"] = round(in_peaks / len(slowest), 2)
    return out
