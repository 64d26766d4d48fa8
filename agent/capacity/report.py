"""Write what the capacity run found: the cap into a config file, a JSON record, a PNG curve."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

from agent.capacity.analysis import LevelResult


def write_cap(path: Path, cap: int) -> None:
    """Set ``[admission] max_sessions`` in a TOML file, keeping everything else as it is."""
    text = path.read_text() if path.exists() else ""
    line = f"max_sessions = {cap}  # measured by cadence capacity"
    section = re.search(r"(?m)^\[admission\][ \t]*$", text)
    if section is None:
        text = (text.rstrip() + "\n\n" if text.strip() else "") + f"[admission]\n{line}\n"
    else:
        start = section.end()
        nxt = re.search(r"(?m)^\[", text[start:])
        end = start + nxt.start() if nxt else len(text)
        body = text[start:end]
        key = re.compile(r"(?m)^[ \t]*max_sessions[ \t]*=.*$")
        body = key.sub(line, body, count=1) if key.search(body) else "\n" + line + body
        text = text[:start] + body + text[end:]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def write_json(path: Path, cap: int, levels: list[LevelResult], meta: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    body = {"cap": cap, **meta, "levels": [dataclasses.asdict(level) for level in levels]}
    path.write_text(json.dumps(body, indent=2))


def _short(reason: str) -> str:
    """'asr_final p99 1154 ms > budget 600 ms' -> 'asr_final'; 'p99 delivery 0.9x < 1.2x' -> 'delivery'."""
    if reason.startswith(("p99 delivery", "server delivery")):
        return "delivery"
    for start, short in (("first audio", "first audio"), ("caller chunk lateness", "lateness"),
                         ("only ", "too few turns")):
        if reason.startswith(start):
            return short
    for part, short in (("unanswered", "unanswered"), ("more than once", "answered twice"),
                        ("caller(s) failed", "callers failed")):
        if part in reason:
            return short
    return reason.split()[0] if " p99 " in reason or " p1 " in reason else reason.split(" (")[0][:24]


def plot(path: Path, cap: int, levels: list[LevelResult], min_ratio: float, title: str = "") -> None:
    """Delivery ratio (p99 across streams, and p50) against concurrency, knee marked."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    levels = sorted(levels, key=lambda r: r.concurrency)
    xs = [r.concurrency for r in levels]
    phone = any(r.transport == "phone" for r in levels)

    def series(values: list[float | None]) -> list[float]:
        return [v if v is not None else float("nan") for v in values]

    fig, ax = plt.subplots(figsize=(7.5, 4.5), dpi=120)
    if phone:  # a paced line delivers at ~1.0x by design: the headroom rule is judged server-side
        p99 = series([r.server_ratio_p1 for r in levels])
        p50 = series([r.p99_ratio for r in levels])
        ax.plot(xs, p99, "o-", color="tab:blue", label="server delivery p1 (TTS -> transport, x real time)")
        ax.plot(xs, p50, "o--", color="tab:blue", alpha=0.45, label="caller-received p1 across streams (paced)")
    else:
        p99 = series([r.p99_ratio for r in levels])
        p50 = series([r.p50_ratio for r in levels])
        ax.plot(xs, p99, "o-", color="tab:blue", label="delivery p99 across streams (x real time)")
        ax.plot(xs, p50, "o--", color="tab:blue", alpha=0.45, label="delivery p50")
    for r, y, y50 in zip(levels, p99, p50, strict=True):
        y = y if y == y else (y50 if y50 == y50 else min_ratio)  # NaN: put the verdict where it can be seen
        why = "pass" if r.passed else "fail: " + ", ".join(_short(x) for x in r.reasons[:2])
        ax.annotate(why, (r.concurrency, y), textcoords="offset points", xytext=(0, 8), ha="center",
                    fontsize=7, color="tab:green" if r.passed else "tab:red")
    ax.axhline(min_ratio, color="tab:red", linestyle=":", label=f"required {min_ratio:.1f}x")
    if cap > 0:
        ax.axvline(cap, color="tab:green", linestyle="--", label=f"knee: cap = {cap} callers")
    ax.set_xscale("log", base=2)
    ax.set_xlim(min(xs) / 1.5, max(xs) * 1.5)  # a level with no data at all must not leave it unbounded
    ax.set_xticks(xs, [str(x) for x in xs])
    ax.set_xlabel("concurrent callers")
    ax.set_ylabel("delivered audio s per wall s")
    finite = [v for v in p99 + p50 if v == v]
    ax.set_ylim(0, max(finite + [min_ratio]) * 1.25)
    ax2 = ax.twinx()
    fa = series([r.first_audio_p99_ms for r in levels])
    ax2.plot(xs, fa, "s-", color="tab:orange", alpha=0.7, label="first audio p99 (ms)")
    if phone:
        ax2.plot(xs, series([r.first_audio_p50_ms for r in levels]), "s--", color="tab:orange", alpha=0.45,
                 label="first audio p50 (ms)")
    ax2.set_ylabel("end of speech -> first audio (ms)", color="tab:orange")
    ax2.set_xlim(ax.get_xlim())
    lines, labels = ax.get_legend_handles_labels()
    l2, lb2 = ax2.get_legend_handles_labels()
    ax.legend(lines + l2, labels + lb2, fontsize=8, loc="lower left")
    ax.set_title(title or "Cadence capacity", fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
