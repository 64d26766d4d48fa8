"""Write a random-weight Parakeet-TDT checkpoint folder that ``asr.model`` can point at.

On CUDA (the default) it is the v3-sized model of the other benches (627 M parameters, 24 blocks
d=1024, 8192 tokens): ``bench.emission.calibrated_model`` biases its joint so our decoder emits
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
import time
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402


def write_tokenizer(out: Path, vocab_size: int) -> None:
    """A word-level ``tokenizer.json``: ``▁t<i>`` pieces (word starts), decoded as ``t<i>`` words."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    vocab = {f"\u2581t{i}": i for i in range(vocab_size)}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="\u2581t0"))
    tok.pre_tokenizer = pre_tokenizers.Metaspace()
    tok.decoder = decoders.Metaspace()
    tok.save(str(out / "tokenizer.json"))


def build(out: Path, tiny: bool = False, seed: int = 0) -> dict:

    from asr.parakeet.features import FeatureConfig

    t0 = time.perf_counter()
    if tiny:
        from bench.stream_engine import tiny_model

        model, info = tiny_model(seed), {"recipe": "asr.parakeet.tiny (toy size)"}
    else:
        if not torch.cuda.is_available():
            raise SystemExit("the v3-sized checkpoint is calibrated on CUDA; use --tiny on the CPU")
        from bench.emission import calibrated_model

        model, info = calibrated_model(target=0.3, clips=8, seconds=10.0, seed=seed)
        info = {"recipe": "bench.emission.calibrated_model (v3-sized)", **info}
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    vocab = model.config.vocab_size - 1  # the last id is blank
    write_tokenizer(out, vocab)
    FeatureConfig(n_mels=model.config.encoder_config.num_mel_bins).save_hf(out)
    params = sum(p.numel() for p in model.parameters())
    meta = {"params_m": round(params / 1e6, 1), "vocab": vocab, "seconds": round(time.perf_counter() - t0, 1),
            "random_weights": True, **info}
    (out / "cadence_random.json").write_text(json.dumps(meta, indent=1, default=str))
    return meta


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", type=Path)
    parser.add_argument("--tiny", action="store_true", help="toy size on the CPU (tests)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    print(json.dumps(build(args.out, args.tiny, args.seed), default=str), flush=True)


if __name__ == "__main__":
    main()
