"""Accuracy of long-file transcription: do window cuts, overlap stitching and packing lose or
double words? WER of whole files of continuous real speech (Asterisk prompts with short
pauses, so windows must be cut inside speech) against their prompt texts, and the WER of the
same prompts transcribed one by one (the engine's own floor).

Usage: python bench/offline_wer.py [--seconds 300] [--files 3]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agent.models import resolve_engine_spec  # noqa: E402
from asr.offline.engine_factory import make_engine  # noqa: E402
from asr.offline.transcriber import transcribe_corpus  # noqa: E402
from asr.offline.window_engine import EngineSpec  # noqa: E402
from bench.offline_report import save  # noqa: E402
from testkit.corpus import normalize  # noqa: E402
from testkit.offline_audio import prompt_clips, speech_track  # noqa: E402


def wer_counts(ref: str, hyp: str) -> dict[str, int]:
    import jiwer

    out = jiwer.process_words(normalize(ref), normalize(hyp) or "<empty>")
    return {"ref_words": len(normalize(ref).split()), "substitutions": out.substitutions,
            "deletions": out.deletions, "insertions": out.insertions}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=300.0)
    ap.add_argument("--files", type=int, default=3)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    engine = make_engine(resolve_engine_spec(EngineSpec()))
    rows = []
    for seed in range(args.files):
        audio, placed = speech_track(args.seconds, seed=100 + seed)
        audio = audio[: int((placed[-1].end_s + 0.3) * 16000)]
        ref = " ".join(p.text for p in placed)
        t0 = time.perf_counter()
        whole = transcribe_corpus(engine, [audio], "en")[0]
        wall = time.perf_counter() - t0
        texts = {c[1] for c in prompt_clips()}
        alone_clips = [c for c in prompt_clips() if c[1] in {p.text for p in placed}]
        alone = [ws for i in range(0, len(alone_clips), 8)  # unpacked: each prompt its own input
                 for ws in engine.transcribe_windows([a for a, _ in alone_clips[i:i + 8]], "en")]
        by_text = {t: "".join(w.text for w in ws) for (_, t), ws in zip(alone_clips, alone, strict=True)}
        alone_hyp = " ".join(by_text[p.text] for p in placed if p.text in texts)
        row = {"seed": 100 + seed, "audio_s": round(len(audio) / 16000, 1), "prompts": len(placed),
               "wall_s": round(wall, 1), "whole_file": wer_counts(ref, whole.text),
               "prompts_one_by_one": wer_counts(ref, alone_hyp)}
        for key in ("whole_file", "prompts_one_by_one"):
            c = row[key]
            c["wer"] = round((c["substitutions"] + c["deletions"] + c["insertions"]) / c["ref_words"], 4)
        rows.append(row)
        print(f"file {seed}: {row['audio_s']} s, {row['prompts']} prompts: WER whole file "
              f"{row['whole_file']['wer']:.3f} (ins {row['whole_file']['insertions']}, "
              f"del {row['whole_file']['deletions']}), one by one {row['prompts_one_by_one']['wer']:.3f}", flush=True)
    total = {k: sum(r[key][k] for r in rows) for key in ("whole_file",) for k in rows[0][key] if k != "wer"}
    one = {k: sum(r["prompts_one_by_one"][k] for r in rows) for k in total}
    summary = {"wer_whole_file": round((total["substitutions"] + total["deletions"] + total["insertions"])
                                       / total["ref_words"], 4),
               "wer_prompts_one_by_one": round((one["substitutions"] + one["deletions"] + one["insertions"])
                                               / one["ref_words"], 4)}
    print(f"WER whole files {summary['wer_whole_file']:.4f} vs prompts one by one "
          f"{summary['wer_prompts_one_by_one']:.4f}")
    print(f"wrote {save('offline_wer_whisper_cpu', {'results': rows, 'summary': summary}, args.out)}")


if __name__ == "__main__":
    main()
