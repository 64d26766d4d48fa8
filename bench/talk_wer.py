"""Word error rate and end of speech -> transcript through ``cadence talk``'s code path, per clip.

Each clip is its own ``talk`` call (one caller, one turn) on engines loaded once: Whisper tiny.en,
the embedded llama.cpp server, Piper. Clips: real recorded Asterisk prompts (short answers, long
sentences) and multi-part utterances made of two prompts with a pause between them
(``testkit.talk_clips``). Prints one line per clip and the totals.

    python bench/talk_wer.py
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from agent.commands import _talk_once  # noqa: E402
from agent.config import load_config  # noqa: E402
from testkit.corpus import wer  # noqa: E402
from testkit.talk_clips import talk_clips  # noqa: E402


def main() -> None:
    config = load_config(None)
    clips = talk_clips(config.audio.in_sample_rate)
    result = asyncio.run(_talk_once(config, [c.audio for c in clips]))
    errors = words = 0
    eos_tx: list[float] = []
    for clip, turn in zip(clips, result.turns, strict=True):
        w = wer(clip.text, turn.transcript)
        n = len(clip.text.split())
        errors += w * n
        words += n
        ms = turn.stages_ms.get("eos_to_transcript")
        if ms is not None:
            eos_tx.append(ms)
        neg = [k for k, v in turn.stages_ms.items() if v < 0]
        print(f"{clip.name:28s} wer={w:4.2f} eos->tx={'-' if ms is None else f'{ms:5.0f}'} "
              f"{'NEGATIVE ' + str(neg) if neg else ''} {turn.transcript!r}")
    # Transcripts pushed after their turn's LLM request started: words the LLM never got.
    late = sum(getattr(t, "late_transcripts", 0) for t in result.timings)
    print(f"clips={len(clips)} WER={errors / words:.3f} empty={sum(not t.transcript for t in result.turns)} "
          f"late_transcripts={late} "
          f"eos_to_transcript p50={np.percentile(eos_tx, 50):.0f} ms max={max(eos_tx):.0f} ms")


if __name__ == "__main__":
    main()
