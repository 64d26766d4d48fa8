"""Process-wide phone transport figures, and a hook for the metrics exporter.

Every observation is kept in a bounded window here (for ``/phone/calls`` and tests) and handed
to each listener as ``(name, value)``, so a Prometheus histogram can be fed without this package
importing any metrics library::

    from transports.phone.stats import PHONE_STATS
    PHONE_STATS.add_listener(lambda name, value: histograms[name].observe(value))

Names: ``output_chunk_lateness_ms`` (every paced chunk but the first of a spurt: sent minus its
slot, whatever the cause), ``output_pacer_lateness_ms`` (the part after the chunk was ready: the
transport's own stalls), ``output_underrun_gap_ms`` (silence the caller heard mid-reply), ``barge_in_clear_ms`` (caller
speech detected -> ``clear`` on the wire), ``input_lag_ms`` (caller audio's arrival -> the VAD analyzed it, sampled),
``protocol_error`` (value: close code).
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from loguru import logger

Listener = Callable[[str, float], None]
WINDOW = 20_000


def percentile(values: Iterable[float], q: float) -> float | None:
    """Nearest-rank percentile (``q`` in 0..100); None for no values."""
    data = sorted(values)
    if not data:
        return None
    rank = max(0, min(len(data) - 1, round(q / 100.0 * len(data) + 0.5) - 1))
    return data[rank]


def summary(values: Iterable[float]) -> dict[str, float | int | None]:
    data = list(values)
    return {"n": len(data), "p50": percentile(data, 50), "p99": percentile(data, 99),
            "max": max(data) if data else None}


@dataclass
class PhoneStats:
    lateness_ms: deque[float] = field(default_factory=lambda: deque(maxlen=WINDOW))
    pacer_ms: deque[float] = field(default_factory=lambda: deque(maxlen=WINDOW))
    gap_ms: deque[float] = field(default_factory=lambda: deque(maxlen=WINDOW))
    barge_in_ms: deque[float] = field(default_factory=lambda: deque(maxlen=WINDOW))
    chunks_sent: int = 0
    underruns: int = 0
    clears: int = 0
    calls_total: int = 0
    refused_total: int = 0
    protocol_errors: Counter[int] = field(default_factory=Counter)
    _listeners: list[Listener] = field(default_factory=list)

    def add_listener(self, listener: Listener) -> None:
        self._listeners.append(listener)

    def remove_listener(self, listener: Listener) -> None:
        self._listeners.remove(listener)

    def _emit(self, name: str, value: float) -> None:
        for listener in self._listeners:
            try:
                listener(name, value)
            except Exception as exc:  # a broken exporter must never stall the audio path
                logger.warning(f"phone stats listener failed on {name}: {exc}")

    def chunk(self, lateness_ms: float | None, pacer_ms: float | None, gap_ms: float) -> None:
        self.chunks_sent += 1
        if lateness_ms is not None:
            self.lateness_ms.append(lateness_ms)
            self._emit("output_chunk_lateness_ms", lateness_ms)
        if pacer_ms is not None:
            self.pacer_ms.append(pacer_ms)
            self._emit("output_pacer_lateness_ms", pacer_ms)
        if gap_ms > 0:
            self.underruns += 1
            self.gap_ms.append(gap_ms)
            self._emit("output_underrun_gap_ms", gap_ms)

    def clear(self) -> None:
        self.clears += 1

    def barge_in(self, ms: float) -> None:
        self.barge_in_ms.append(ms)
        self._emit("barge_in_clear_ms", ms)

    def input_lag(self, ms: float) -> None:
        """Caller audio: its arrival on the socket -> the VAD analyzed it (``agent.timed_vad``)."""
        self._emit("input_lag_ms", ms)

    def protocol_error(self, code: int) -> None:
        self.protocol_errors[code] += 1
        self._emit("protocol_error", float(code))

    def snapshot(self) -> dict[str, object]:
        return {
            "chunks_sent": self.chunks_sent,
            "underruns": self.underruns,
            "clears": self.clears,
            "calls_total": self.calls_total,
            "refused_total": self.refused_total,
            "protocol_errors": {str(k): v for k, v in self.protocol_errors.items()},
            "output_chunk_lateness_ms": summary(self.lateness_ms),
            "output_pacer_lateness_ms": summary(self.pacer_ms),
            "output_underrun_gap_ms": summary(self.gap_ms),
            "barge_in_clear_ms": summary(self.barge_in_ms),
        }


PHONE_STATS = PhoneStats()


@dataclass
class CallStats:
    """One call's figures; every observation is also forwarded to ``PHONE_STATS``."""

    media_in: int = 0
    media_dropped: int = 0  # media beyond real time (``max_input_rt_ratio``), not passed on
    chunks_out: int = 0
    marks_sent: int = 0
    marks_echoed: int = 0
    clears: int = 0
    lateness_ms: list[float] = field(default_factory=list)
    pacer_ms: list[float] = field(default_factory=list)
    gap_ms: list[float] = field(default_factory=list)
    barge_in_ms: list[float] = field(default_factory=list)
    barge_in_resumed: int = 0  # fast barge-ins the pipeline never confirmed: playback resumed
    dtmf: list[str] = field(default_factory=list)
    totals: PhoneStats = field(default_factory=lambda: PHONE_STATS)

    def chunk(self, lateness_ms: float | None, pacer_ms: float | None, gap_ms: float) -> None:
        self.chunks_out += 1
        if lateness_ms is not None:
            self.lateness_ms.append(lateness_ms)
        if pacer_ms is not None:
            self.pacer_ms.append(pacer_ms)
        if gap_ms > 0:
            self.gap_ms.append(gap_ms)
        self.totals.chunk(lateness_ms, pacer_ms, gap_ms)

    def clear(self) -> None:
        self.clears += 1
        self.totals.clear()

    def barge_in(self, ms: float) -> None:
        self.barge_in_ms.append(ms)
        self.totals.barge_in(ms)

    def as_dict(self) -> dict[str, object]:
        return {
            "media_in": self.media_in, "media_dropped": self.media_dropped, "chunks_out": self.chunks_out, "marks_sent": self.marks_sent,
            "marks_echoed": self.marks_echoed, "clears": self.clears, "underruns": len(self.gap_ms),
            "dtmf": "".join(self.dtmf),
            "output_chunk_lateness_ms": summary(self.lateness_ms),
            "output_pacer_lateness_ms": summary(self.pacer_ms),
            "output_underrun_gap_ms": summary(self.gap_ms),
            "barge_in_clear_ms": [round(v, 1) for v in self.barge_in_ms],
            "barge_in_resumed": self.barge_in_resumed,
        }
