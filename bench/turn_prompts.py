"""Which of the capacity run's prompts does smart-turn judge unfinished (so the turn waits its silence fallback)?

``cadence capacity`` plays Debian's Asterisk recordings (``agent.capacity.corpus.recorded_prompts``, the pack
``bench/wheels_cascade.sh`` writes to ``.cascade/prompts.npz``). Every prompt, with ``--tails`` seconds of
digital quiet after it (the VAD stops 0.2 s after the last voiced frame), is scored by pipecat's bundled int8
ONNX smart-turn v3 (``vad.turn_model = "onnx"``) and by the float torch model the engine process runs
(``"engine"``, ``agent.smart_turn``) on the CPU. Printed per prompt: both probabilities per tail, and the
transcript of Debian's index with whether it reads as a finished sentence (``agent.sentence_end``), so a
fragment ("You are currently caller number") can be told from a misjudged sentence ("Hello world.").

    python bench/turn_prompts.py                    # writes bench/results/turn_prompts_cpu/turn_prompts.json
"""

from __future__ import annotations

import argparse
import gzip
import os
import sys
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

TRANSCRIPTS = Path("/usr/share/doc/asterisk-core-sounds-en/core-sounds-en.txt.gz")
THRESHOLD = 0.5  # pipecat's: a probability above it ends the turn


def transcripts() -> dict[str, str]:
    """Debian's index of the Asterisk prompts: name -> what it says (empty without the package's docs)."""
    if not TRANSCRIPTS.exists():
        return {}
    out = {}
    with gzip.open(TRANSCRIPTS, "rt", encoding="utf-8", errors="replace") as index:
        for line in index:
            name, sep, text = line.partition(":")
            if sep:
                out[name.strip()] = text.strip()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pack", type=Path, default=ROOT / ".cascade/prompts.npz",
                    help="a prompts pack (agent.capacity.corpus.write_ulaw_pack); written here if missing")
    ap.add_argument("--tails", default="0.2,0.4", help="seconds of quiet after each prompt, comma-separated")
    ap.add_argument("--weights", default="", help="smart-turn weights (.onnx or .npz); default pipecat's bundled file")
    ap.add_argument("--out", type=Path, default=ROOT / "bench/results/turn_prompts_cpu")
    args = ap.parse_args()

    from pipecat.audio.turn.smart_turn.base_smart_turn import SmartTurnParams

    from agent.capacity.corpus import pack_audio_16k, read_ulaw_pack, recorded_prompts, write_ulaw_pack
    from agent.sentence_end import reads_finished
    from agent.shared_models import SharedSmartTurnAnalyzerV3
    from agent.smart_turn.batcher import TurnBatcher
    from agent.smart_turn.onnx_weights import load_model
    from bench.common import write_result

    if not args.pack.exists():
        write_ulaw_pack(args.pack, recorded_prompts())
    names = [name for name, _ in read_ulaw_pack(args.pack)]
    audio, samples = pack_audio_16k(args.pack)
    onnx = SharedSmartTurnAnalyzerV3(params=SmartTurnParams(stop_secs=0.8))
    onnx.set_sample_rate(16000)
    torch_model = TurnBatcher(model=load_model(args.weights or None), device="cpu")
    text = transcripts()
    tails = [float(t) for t in args.tails.split(",")]
    rows = [{"name": n, "text": text.get(n, ""), "reads_finished": reads_finished(text.get(n, "")),
             "seconds": round(int(samples[i]) / 16000, 2)} for i, n in enumerate(names)]
    summary = {}
    for tail in tails:
        quiet = np.zeros(int(16000 * tail), np.float32)
        clips = [np.concatenate([audio[i, : samples[i]], quiet]) for i in range(len(names))]
        p_onnx = [float(onnx._predict_endpoint(c)["probability"]) for c in clips]
        p_torch = np.concatenate([torch_model.score(clips[k:k + torch_model.max_batch])
                                  for k in range(0, len(clips), torch_model.max_batch)])
        for row, a, b in zip(rows, p_onnx, p_torch, strict=True):
            row[f"onnx_{tail}"], row[f"torch_{tail}"] = round(a, 3), round(float(b), 3)
        onnx_waits = np.array(p_onnx) <= THRESHOLD
        torch_waits = p_torch <= THRESHOLD
        summary[str(tail)] = {"prompts": len(names), "onnx_unfinished": int(onnx_waits.sum()),
                              "torch_unfinished": int(torch_waits.sum()),
                              "disagree": int((onnx_waits != torch_waits).sum())}
    first = tails[0]
    for row in sorted(rows, key=lambda r: r[f"onnx_{first}"]):
        if row[f"onnx_{first}"] <= THRESHOLD or row[f"torch_{first}"] <= THRESHOLD:
            probs = " ".join(f"{row[f'onnx_{t}']:.2f}/{row[f'torch_{t}']:.2f}" for t in tails)
            print(f"{row['name']:34s} {probs}  {'finished' if row['reads_finished'] else '        '}  {row['text']}")
    for tail, s in summary.items():
        print(f"{tail} s of quiet: {s}")
    path = write_result("turn_prompts", {"tails_s": tails, "threshold": THRESHOLD, "summary": summary,
                                         "prompts": rows}, args.out)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
