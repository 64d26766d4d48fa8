"""Write a random-weight instruct LLM folder that ``transformers serve`` (or vLLM) can load offline.

The shape is a real instruct model's (``--shape llama-3.2-1b``: 1.24 B parameters, 128256 tokens,
16 layers, GQA 32/8; ``qwen3-1.7b``: 2.0 B, 151936 tokens, 28 layers, GQA 16/8), in bf16, so
prefill, decode and the KV cache cost what they cost for the real model. The weights are random,
so replies run to ``max_tokens`` (the special tokens' rows are zeroed: a reply never ends early or
decodes to nothing): the LLM stage caps them (``llm.max_tokens``).

The tokenizer is a word-level stand-in whose every token decodes to an English word (each word is
repeated under invisible superscript-digit suffixes that the decoder strips), one in nine with a
comma and one in twenty-three with a full stop: replies are nonsense, but they are words with
clause marks, so the TTS stage speaks words and starts on the first clause as it would for real
text. ``--tiny`` writes the same with 2 layers at width 64 (tests, CPU).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

SHAPES = {
    "llama-3.2-1b": dict(arch="llama", vocab_size=128256, hidden_size=2048, intermediate_size=8192,
                         num_hidden_layers=16, num_attention_heads=32, num_key_value_heads=8, head_dim=64,
                         rope_theta=500000.0, tie_word_embeddings=True),
    "qwen3-1.7b": dict(arch="qwen3", vocab_size=151936, hidden_size=2048, intermediate_size=6144,
                       num_hidden_layers=28, num_attention_heads=16, num_key_value_heads=8, head_dim=128,
                       rope_theta=1000000.0, tie_word_embeddings=True),
    "tiny": dict(arch="llama", vocab_size=4096, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                 num_attention_heads=4, num_key_value_heads=2, head_dim=16, rope_theta=10000.0,
                 tie_word_embeddings=True),
}
SUPERSCRIPT = "\u2070\u00b9\u00b2\u00b3\u2074\u2075\u2076\u2077\u2078\u2079"
SUFFIX_RE = "[" + SUPERSCRIPT + "]+"
SPECIALS = ["<unk>", "</s>", "<s>"]


def words() -> list[str]:
    from agent.capacity.corpus import QUESTIONS
    from asr.parakeet.tiny import _WORD_TEXT

    seen: dict[str, None] = {}
    for w in (_WORD_TEXT + " " + " ".join(QUESTIONS)).lower().split():
        w = "".join(c for c in w if c.isalpha())
        if w:
            seen[w] = None
    return list(seen)


def stand_in_vocab(size: int) -> list[str]:
    """``size`` distinct tokens: specials, then English words under invisible suffixes, some with , or ."""
    base = words()
    out = list(SPECIALS)
    i = 0
    while len(out) < size:
        word = base[i % len(base)]
        tag = "".join(SUPERSCRIPT[int(d)] for d in str(i // len(base))) if i >= len(base) else ""
        mark = "," if i % 9 == 4 else "." if i % 23 == 11 else ""
        out.append(f"\u2581{word}{tag}{mark}")
        i += 1
    return out


def write_tokenizer(out: Path, size: int) -> None:
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {tok: i for i, tok in enumerate(stand_in_vocab(size))}
    tk = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    # prompts in any case and punctuation meet the plain lower-case words (unknown words: <unk>)
    tk.normalizer = normalizers.Sequence([normalizers.Lowercase(), normalizers.Replace(Regex("[^a-z ]"), "")])
    tk.pre_tokenizer = pre_tokenizers.Metaspace()
    tk.decoder = decoders.Sequence([decoders.Replace(Regex(SUFFIX_RE), ""), decoders.Metaspace()])
    tok = PreTrainedTokenizerFast(tokenizer_object=tk, unk_token="<unk>", eos_token="</s>", bos_token="<s>",
                                  pad_token="<unk>")
    tok.chat_template = "{% for m in messages %}{{ m['content'] }} {% endfor %}"
    tok.save_pretrained(out)


def build(out: Path, shape: str = "llama-3.2-1b", seed: int = 0) -> dict:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen3Config, Qwen3ForCausalLM

    spec = dict(SHAPES[shape])
    arch = spec.pop("arch")
    config_cls, model_cls = (LlamaConfig, LlamaForCausalLM) if arch == "llama" else (Qwen3Config, Qwen3ForCausalLM)
    config = config_cls(**spec, max_position_embeddings=8192, bos_token_id=2, eos_token_id=1, pad_token_id=0)
    t0 = time.perf_counter()
    torch.manual_seed(seed)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    with torch.device(device):
        model = model_cls(config).to(torch.bfloat16).eval()
    with torch.no_grad():  # zero logits for the specials: random weights never end or pad a reply
        model.get_input_embeddings().weight[: len(SPECIALS)].zero_()
        model.get_output_embeddings().weight[: len(SPECIALS)].zero_()
    # Sample (servers follow the folder's generation config): greedy decoding of random tied weights
    # repeats one word, which would never reach a clause mark.
    gen = model.generation_config
    gen.do_sample, gen.temperature, gen.top_k, gen.top_p = True, 1.0, 0, 1.0
    gen.bos_token_id, gen.eos_token_id, gen.pad_token_id = 2, 1, 0
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    write_tokenizer(out, config.vocab_size)
    meta = {"shape": shape, "params_b": round(sum(p.numel() for p in model.parameters()) / 1e9, 3),
            "dtype": "bfloat16", "random_weights": True, "seconds": round(time.perf_counter() - t0, 1)}
    (out / "cadence_random.json").write_text(json.dumps(meta))
    return meta


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", type=Path)
    parser.add_argument("--shape", choices=sorted(SHAPES), default="llama-3.2-1b")
    parser.add_argument("--tiny", action="store_true", help="same as --shape tiny")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    print(json.dumps(build(args.out, "tiny" if args.tiny else args.shape, args.seed)), flush=True)


if __name__ == "__main__":
    main()
