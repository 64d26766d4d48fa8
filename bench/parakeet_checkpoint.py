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
    python bench/parakeet_checkpoint.py /tmp/parakeet-v3 --calibrate-on .cascade/prompts.npz

``--calibrate-on`` biases the emission on the prompts a capacity run plays (a ``write_ulaw_pack`` file, 8 kHz
mu-law, upsampled to 16 kHz the way the phone line does) instead of random clips: calibrated on noise, the
random model decoded nothing for many prompt segments, and a turn without transcript text waits for
pipecat's 5 s stop timeout (run 29: 179 empty finals).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from asr.parakeet.random_v3 import write_random_checkpoint  # noqa: E402


def prompt_audio(pack: Path) -> tuple:
    """The pack's prompts as (16 kHz float32 (B, T) zero-padded, samples (B,)) torch tensors."""
    import torch

    from agent.capacity.corpus import pack_audio_16k

    audio, samples = pack_audio_16k(pack)
    return torch.from_numpy(audio), torch.from_numpy(samples)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", type=Path)
    parser.add_argument("--tiny", action="store_true", help="toy size on the CPU (tests)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--calibrate-on", type=Path, default=None,
                        help="a prompts pack (agent.capacity.corpus.write_ulaw_pack) to calibrate the emission on")
    args = parser.parse_args()
    audio = prompt_audio(args.calibrate_on) if args.calibrate_on is not None and not args.tiny else None
    print(json.dumps(write_random_checkpoint(args.out, args.tiny, args.seed, audio), default=str), flush=True)


if __name__ == "__main__":
    main()
