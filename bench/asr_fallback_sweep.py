"""Moonshine tiny-en, Whisper tiny.en and Moonshine with Whisper as the fallback: word error rate per threshold.

Every recorded Asterisk prompt of up to ``--max-s`` seconds (``testkit.corpus``) plus the 12 talk clips,
each with 0.5 s of quiet on both sides (as a VAD segment reaches the service: lead-in, trailing
padding), is transcribed by both engines once. For each threshold the combined transcript is Whisper's
where Moonshine's lowest token probability is under it (or its decode did not stop), else Moonshine's
(``asr.moonshine.whisper_fallback``). Printed and saved: WER of each choice over all clips and over the
clips longer than 1.5 s (sentences, as callers say them), the share sent to Whisper, and each engine's
mean time per clip.

    python bench/asr_fallback_sweep.py              # ~8 min on 2 cores
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from agent.models import moonshine_model_dir, whisper_model_dir  # noqa: E402
from asr.moonshine.model import shared_moonshine_model  # noqa: E402
from asr.whisper_model import shared_whisper_model, transcribe_greedy  # noqa: E402
from testkit.corpus import normalize, prompts, wer  # noqa: E402
from testkit.talk_clips import load_audio, talk_clips  # noqa: E402

RATE = 16000
THRESHOLDS = (0.0, 0.3, 0.4, 0.45, 0.5, 0.55, 0.6, 0.7, 0.8, 1.0)


def clips(max_s: float) -> list[tuple[str, str, np.ndarray]]:
    quiet = np.zeros(RATE // 2, np.float32)
    out = [(p.name, p.text, load_audio(p.path, RATE)) for p in prompts(min_words=1)]
    out = [c for c in out if len(c[2]) <= max_s * RATE]
    out += [(f"talk:{c.name}", c.text, c.audio) for c in talk_clips(RATE)]
    return [(name, text, np.concatenate([quiet, audio, quiet])) for name, text, audio in out]


def rate(rows: list[dict], pick) -> float:
    words = sum(r["words"] for r in rows)
    return sum(pick(r) * r["words"] for r in rows) / max(words, 1)


def main(args: argparse.Namespace) -> dict:
    moon = shared_moonshine_model(str(moonshine_model_dir()), args.threads)
    whisper = shared_whisper_model(str(whisper_model_dir()), "cpu", "int8", args.threads)
    rows = []
    for name, text, audio in clips(args.max_s):
        t0 = time.perf_counter()
        m = moon.transcribe_scored(audio)
        t1 = time.perf_counter()
        w = transcribe_greedy(whisper, audio, "en", 0.9)
        t2 = time.perf_counter()
        rows.append({"name": name, "text": text, "words": len(normalize(text).split()), "seconds": len(audio) / RATE - 1,
                     "moonshine": m.text, "min_prob": round(m.min_prob, 4), "stopped": m.stopped, "whisper": w,
                     "wer_moonshine": wer(text, m.text), "wer_whisper": wer(text, w),
                     "ms_moonshine": round((t1 - t0) * 1e3, 1), "ms_whisper": round((t2 - t1) * 1e3, 1)})
    sets = {"all": rows, "over_1.5s": [r for r in rows if r["seconds"] > 1.5]}
    summary: dict = {}
    for key, subset in sets.items():
        entry = {"clips": len(subset), "wer_moonshine": rate(subset, lambda r: r["wer_moonshine"]),
                 "wer_whisper": rate(subset, lambda r: r["wer_whisper"]), "thresholds": []}
        for th in THRESHOLDS:
            def to_whisper(r: dict, th: float = th) -> bool:
                return r["min_prob"] < th or not r["stopped"]

            entry["thresholds"].append({
                "below": th, "to_whisper": sum(map(to_whisper, subset)) / max(len(subset), 1),
                "wer": rate(subset, lambda r, f=to_whisper: r["wer_whisper"] if f(r) else r["wer_moonshine"])})
        summary[key] = entry
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    return {"command": " ".join(sys.argv), "commit": commit, "threads": args.threads,
            "mean_ms": {"moonshine": float(np.mean([r["ms_moonshine"] for r in rows])),
                        "whisper": float(np.mean([r["ms_whisper"] for r in rows]))},
            "summary": summary, "rows": rows}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--max-s", type=float, default=12.0, help="longest prompt taken (s)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", default=str(ROOT / "bench/results/asr_fallback_sweep.json"))
    cli = parser.parse_args()
    result = main(cli)
    Path(cli.out).write_text(json.dumps(result, indent=1))
    print(f"mean ms per clip: {result['mean_ms']}")
    for key, entry in result["summary"].items():
        print(f"{key}: {entry['clips']} clips, Moonshine {entry['wer_moonshine']:.4f}, Whisper {entry['wer_whisper']:.4f}")
        for t in entry["thresholds"]:
            print(f"   below {t['below']:.2f}: {t['to_whisper']:.0%} to Whisper, WER {t['wer']:.4f}")
    print(f"wrote {cli.out}")
