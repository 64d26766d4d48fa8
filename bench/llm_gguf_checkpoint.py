"""Write a random-weight instruct LLM as one GGUF file for llama.cpp's ``llama-server`` (``llm.server =
"llama-server"``), in the shape of a real model (``--shape llama-3.2-1b``: 16 layers, width 2048, GQA 32/8,
FFN 8192, 128256 tokens), f16, so prefill, decode and the KV cache cost what they cost for the real model.

The tokenizer is Llama 3's own (``models/ggml-vocab-llama-bpe.gguf`` from llama.cpp's source, vocabulary
and merges only): prompts are tokenized exactly as the real model's. The output head is untied and
over 40 tokens only: 38 words of ``bench/llm_checkpoint.py``'s stand-in list (the first that are single
Llama 3 tokens), ``,`` and ``.``, few enough that llama-server's default samplers (top-k 40, min-p 0.05, top-p
0.95) keep them all. A reply is nonsense made of the same English words as there, with a comma after one word in nine and a full stop after one in twenty-three, the rates of
``bench/llm_checkpoint.py``'s word-level stand-in tokenizer for transformers serve, so the TTS stage starts on
the first clause as early as it does there and the two servers are compared on the same text. Those rates
hold at every step: every token embedding carries one large constant dimension (``ANCHOR``) that dominates
the residual stream through the random layers, so the final normed hidden state always points the same
way, and the head reads that dimension only (fixed logits, sampled at temperature 1). A head reading random
directions over 2,000 byte-level word pieces (run 38) gave one comma in ~25 words, so the TTS waited for
twelve words, and pieces such as "str" and "def" (run 40) cost Kokoro more than the words they stand for. The layers still
compute on everything. Every other row of the head is zero, so special tokens never win and replies run to
``max_tokens``.

``--tiny`` writes 2 layers at width 64 (CPU tests of the server path). Needs ``gguf`` (llama.cpp's gguf-py:
``PYTHONPATH=<llama.cpp>/gguf-py``) and numpy.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent))
from llm_checkpoint import words as stand_in_words  # noqa: E402 (bench/ is not a package)

SHAPES = {
    "llama-3.2-1b": dict(n_embd=2048, n_ff=8192, n_layer=16, n_head=32, n_head_kv=8, rope_theta=500000.0),
    "tiny": dict(n_embd=64, n_ff=128, n_layer=2, n_head=4, n_head_kv=2, rope_theta=10000.0),
}
# Llama 3's chat format, with tools listed in the system turn when a request carries them
CHAT_TEMPLATE = (
    "{{- bos_token }}"
    "{%- for message in messages %}"
    "{{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' }}"
    "{%- if message['content'] is string %}{{- message['content'] }}"
    "{%- elif message['content'] %}{%- for part in message['content'] %}{{- part['text'] }}{%- endfor %}{%- endif %}"
    "{%- if loop.first and tools %}{{- '\\n\\nTools: ' + (tools | tojson) }}{%- endif %}"
    "{{- '<|eot_id|>' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{%- endif %}"
)
WORDS = 38  # the first words of bench/llm_checkpoint.py's list that are single Llama 3 tokens ("\u0120word")
SPOKEN_LOGIT = 30.0  # over the zero rows' 0: the other 128k tokens together weigh ~e^-18 of the spoken ones
MARKS_PER_WORD = {",": 1 / 9, ".": 1 / 23}  # as bench/llm_checkpoint.py's vocabulary
ANCHOR = 1000.0  # the embeddings' constant dimension 0 (f16 holds it; the layers add O(1) per layer)


def vocab_fields(vocab_path: Path):
    """The tokenizer fields of a vocab-only GGUF (tokens, types, merges, special ids, pre-tokenizer)."""
    from gguf import GGUFReader

    r = GGUFReader(str(vocab_path))
    f = r.fields
    tokens = [bytes(f["tokenizer.ggml.tokens"].parts[i]).decode() for i in f["tokenizer.ggml.tokens"].data]
    types = [int(f["tokenizer.ggml.token_type"].parts[i][0]) for i in f["tokenizer.ggml.token_type"].data]
    merges = [bytes(f["tokenizer.ggml.merges"].parts[i]).decode() for i in f["tokenizer.ggml.merges"].data]
    return dict(model=f["tokenizer.ggml.model"].contents(), pre=f["tokenizer.ggml.pre"].contents(),
                tokens=tokens, types=types, merges=merges, bos=int(f["tokenizer.ggml.bos_token_id"].contents()),
                eos=int(f["tokenizer.ggml.eos_token_id"].contents()))


def output_head(tokens: list[str], n_embd: int) -> tuple[np.ndarray, int]:
    """Rows that read dimension 0 only, for the spoken tokens (see the module docstring); zero elsewhere."""
    head = np.zeros((len(tokens), n_embd), dtype=np.float32)
    index = {t: i for i, t in enumerate(tokens)}
    words = [index["\u0120" + w] for w in stand_in_words() if "\u0120" + w in index][:WORDS]
    # the RMS-normed final state: dimension 0 is ~sqrt(n_embd) (the anchor dominates), the rest ~0
    h0 = np.sqrt(n_embd)
    head[words, 0] = SPOKEN_LOGIT / h0
    for mark, per_word in MARKS_PER_WORD.items():
        head[tokens.index(mark), 0] = (SPOKEN_LOGIT + np.log(per_word * len(words))) / h0
    return head.astype(np.float16), len(words)


def build(out: Path, vocab: Path, shape: str = "llama-3.2-1b", seed: int = 0) -> dict:
    from gguf import GGUFWriter, TokenType  # noqa: F401 (TokenType: the vocab's types are kept as read)

    t0 = time.perf_counter()
    s = SHAPES[shape]
    v = vocab_fields(vocab)
    rng = np.random.default_rng(seed)
    n_embd, n_ff, n_head, n_kv = s["n_embd"], s["n_ff"], s["n_head"], s["n_head_kv"]
    head_dim = n_embd // n_head
    w = GGUFWriter(str(out), "llama")
    w.add_name(f"cadence-random-{shape}")
    w.add_context_length(8192)
    w.add_embedding_length(n_embd)
    w.add_feed_forward_length(n_ff)
    w.add_block_count(s["n_layer"])
    w.add_head_count(n_head)
    w.add_head_count_kv(n_kv)
    w.add_rope_dimension_count(head_dim)
    w.add_rope_freq_base(s["rope_theta"])
    w.add_layer_norm_rms_eps(1e-5)
    w.add_vocab_size(len(v["tokens"]))
    w.add_file_type(1)  # mostly f16
    w.add_tokenizer_model(v["model"])
    w.add_tokenizer_pre(v["pre"])
    w.add_token_list(v["tokens"])
    w.add_token_types(v["types"])
    w.add_token_merges(v["merges"])
    w.add_bos_token_id(v["bos"])
    w.add_eos_token_id(v["eos"])
    w.add_add_bos_token(False)  # the chat template writes it
    w.add_chat_template(CHAT_TEMPLATE)

    def normal(*shape_: int, std: float = 0.02) -> np.ndarray:
        return (rng.standard_normal(shape_, dtype=np.float32) * std).astype(np.float16)

    n_vocab = len(v["tokens"])
    embd = normal(n_vocab, n_embd)
    embd[:, 0] = ANCHOR
    w.add_tensor("token_embd.weight", embd)
    w.add_tensor("output_norm.weight", np.ones(n_embd, dtype=np.float32))
    head, n_words = output_head(v["tokens"], n_embd)
    w.add_tensor("output.weight", head)
    for i in range(s["n_layer"]):
        p = f"blk.{i}."
        w.add_tensor(p + "attn_norm.weight", np.ones(n_embd, dtype=np.float32))
        w.add_tensor(p + "attn_q.weight", normal(n_head * head_dim, n_embd))
        w.add_tensor(p + "attn_k.weight", normal(n_kv * head_dim, n_embd))
        w.add_tensor(p + "attn_v.weight", normal(n_kv * head_dim, n_embd))
        w.add_tensor(p + "attn_output.weight", normal(n_embd, n_head * head_dim))
        w.add_tensor(p + "ffn_norm.weight", np.ones(n_embd, dtype=np.float32))
        w.add_tensor(p + "ffn_gate.weight", normal(n_ff, n_embd))
        w.add_tensor(p + "ffn_up.weight", normal(n_ff, n_embd))
        w.add_tensor(p + "ffn_down.weight", normal(n_embd, n_ff))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    params = n_vocab * n_embd * 2 + s["n_layer"] * (2 * n_embd * n_head * head_dim + 2 * n_embd * n_kv * head_dim
                                                   + 3 * n_embd * n_ff)
    return {"shape": shape, "file": str(out), "bytes": out.stat().st_size, "params_b": round(params / 1e9, 3),
            "dtype": "float16", "random_weights": True, "spoken_tokens": n_words, "seconds": round(time.perf_counter() - t0, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", type=Path, help="the .gguf file to write")
    parser.add_argument("--vocab", type=Path, required=True, help="a vocab-only GGUF (llama.cpp's models/ggml-vocab-llama-bpe.gguf)")
    parser.add_argument("--shape", choices=sorted(SHAPES), default="llama-3.2-1b")
    parser.add_argument("--tiny", action="store_true", help="--shape tiny")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    print(json.dumps(build(args.out, args.vocab, "tiny" if args.tiny else args.shape, args.seed)))


if __name__ == "__main__":
    main()
