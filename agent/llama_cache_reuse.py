"""Keep the embedded LLM's KV cache across a context trim (what llama.cpp's own server calls ``--cache-reuse``).

llama-cpp-python reuses only the longest common prefix of the cached and the new prompt. When
``agent.context_window`` drops a call's oldest turns, the new prompt is the system prompt followed by
turns that are still in the cache, only further along, so the common prefix ends with the system
prompt and every kept turn is evaluated again: ~850 tokens, seconds on two cores, a pause the caller
hears after every trim. Here, before each completion, chunks of the cache that reappear further on in
the new prompt are moved to where the prompt has them (the cells in between removed, the chunk's
positions shifted; llama.cpp re-rotates the shifted keys), so only what is really new is evaluated.

Trade-off (the same as llama.cpp's server makes for cache reuse and context shifting): a moved token's
keys and values were computed while the dropped turns still came before it, so a faint trace of those
turns stays in the kept ones; the model never attends to the dropped tokens themselves. On SmolLM2 the
next-token distributions of a new turn differ from a fresh read by ~0.006 nats (KL) a token
(``tests/test_llama_cache_reuse.py``). On a server shared by several calls, a run of ``MIN_CHUNK``
tokens one call repeats from another's cache (a stock phrase) is moved too, with the same faint trace
of what preceded it there.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

import numpy as np

MIN_CHUNK = 32  # tokens: shorter matches (role markers, common words) are not worth a move


def _next_chunk(cache: np.ndarray, c: int, prompt: np.ndarray, p: int, min_chunk: int) -> tuple[int, int]:
    """The first ``(start, length)`` at or after ``cache[c]`` that repeats ``prompt[p:]`` for at least
    ``min_chunk`` tokens; ``(len(cache), 0)`` when there is none."""
    if len(prompt) - p >= min_chunk:
        for start in c + np.flatnonzero(cache[c:] == prompt[p]):
            n = min(len(cache) - start, len(prompt) - p)
            if n < min_chunk:
                break
            differ = np.flatnonzero(cache[start:start + n] != prompt[p:p + n])
            length = int(differ[0]) if differ.size else n
            if length >= min_chunk:
                return int(start), length
    return len(cache), 0


def reuse_moved_chunks(llama: Any, tokens: Sequence[int], min_chunk: int = MIN_CHUNK) -> int:
    """Move cached chunks of ``tokens`` that sit further on in ``llama``'s KV cache to their place in
    ``tokens``; returns how many cached tokens were moved (0: the cache is left as it was)."""
    from llama_cpp import llama_cpp

    n_cached = int(llama.n_tokens)
    ctx = llama._ctx
    if n_cached == 0 or ctx.memory is None or not llama_cpp.llama_memory_can_shift(ctx.memory):
        return 0
    cache = np.array(llama.input_ids[:n_cached], dtype=np.intc)
    prompt = np.asarray(tokens, dtype=np.intc)
    head_p = head_c = min(n_cached, len(prompt))
    differ = np.flatnonzero(cache[:head_p] != prompt[:head_p])
    if differ.size:
        head_p = head_c = int(differ[0])
    moved = 0
    while head_c < n_cached and head_p < len(prompt):
        head_c, n = _next_chunk(cache, head_c, prompt, head_p, min_chunk)
        if not n:
            break
        ctx.kv_cache_seq_rm(0, head_p, head_c)
        ctx.kv_cache_seq_shift(0, head_c, head_c + n, head_p - head_c)
        llama.input_ids[head_p:head_p + n] = cache[head_c:head_c + n]
        head_c += n
        head_p += n
        moved += n
    if moved:
        ctx.kv_cache_seq_rm(0, head_p, -1)  # what was not moved is stale
        llama.n_tokens = head_p
        llama._requires_eval = True  # the last logits belong to another prompt
    return moved


def prompt_tokens(llama: Any, prompt: str) -> list[int]:
    """``prompt`` tokenized as ``Llama.create_completion`` does for a text prompt."""
    bos = [llama.token_bos()] if llama._model.add_bos_token() and llama.token_bos() >= 0 else []
    return bos + llama.tokenize(prompt.encode("utf-8"), add_bos=False, special=True)


class CacheReusingLlama:
    """A ``Llama`` whose text completions first move reusable cached chunks into place."""

    def __init__(self, llama: Any) -> None:
        self._llama = llama

    def __getattr__(self, name: str) -> Any:
        return getattr(self._llama, name)

    def create_completion(self, prompt: Any, **kwargs: Any) -> Any:
        if isinstance(prompt, str):
            moved = reuse_moved_chunks(self._llama, prompt_tokens(self._llama, prompt))
            if moved and self._llama.verbose:
                print(f"cache reuse: moved {moved} cached tokens into place", file=sys.stderr, flush=True)
        return self._llama.create_completion(prompt=prompt, **kwargs)
