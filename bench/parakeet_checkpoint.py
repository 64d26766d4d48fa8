"""Write a random-weight Parakeet-TDT checkpoint folder that ``asr.model`` can point at.

On CUDA (the default) it is the v3-sized model of the other benches (627 M parameters, 24 blocks
d=1024, 8192 tokens): ``asr.parakeet.random_v3.calibrated_model`` biases its joint so our decoder emits
about 0.3 tokens per encoder frame, as speech does, so the streaming batcher does a realistic amount
of decoding. ``--tiny`` writes the same architecture at toy size with the tiny checkpoint's
calibration (CPU, seconds), which is how the tests check the folder loads through
``ParakeetEngine.from_pretrained``.

The tokenizer is a word-level stand-in (``tokenizer.json``: token i is the word ``t<i>``), so
transcripts read ``t17 t4051 ...``: the words are nonsense, the shapes and the work are real.

    python bench/parakeet_checkpoint.py /tmp/parakeet-v3          # CUDA, v3-sized
    python bench/parakeet_checkpoint.py /tmp/parakeet-tiny --tiny  # CPU, toy-sized
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from asr.parakeet.random_v3 import write_random_checkpoint  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", type=Path)
    parser.add_argument("--tiny", action="store_true", help="toy size on the CPU (tests)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    print(json.dumps(write_random_checkpoint(args.out, args.tiny, args.seed), default=str), flush=True)


if __name__ == "__main__":
    main()
