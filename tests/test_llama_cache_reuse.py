"""After a context trim the embedded model's cache is moved, not recomputed (real SmolLM2, in process)."""

from __future__ import annotations

import numpy as np
import pytest

from agent.llama_cache_reuse import prompt_tokens, reuse_moved_chunks
from testkit.long_call import caller_lines

SYSTEM = "<|im_start|>system\nYou are a friendly receptionist on the phone. Answer briefly.<|im_end|>\n"
REPEAT = "<|im_start|>user\nAgain: "


def _turns(lines: list[str]) -> str:
    return "".join(f"<|im_start|>user\n{line}<|im_end|>\n<|im_start|>assistant\nNoted, {len(line)}.<|im_end|>\n"
                   for line in lines)


@pytest.fixture(scope="module")
def llama():
    from llama_cpp import Llama

    from agent.models import smollm2_gguf

    # logits_all: the test reads the logits of every token of the new turn
    return Llama(str(smollm2_gguf()), n_ctx=1024, n_threads=2, n_threads_batch=2, logits_all=True, verbose=False)


def _log_probs(llama, start: int, stop: int) -> np.ndarray:
    """Next-token log-probabilities after each of the tokens at ``start:stop``."""
    logits = llama.scores[start:stop].astype(np.float64)
    logits -= logits.max(axis=1, keepdims=True)
    return logits - np.log(np.exp(logits).sum(axis=1, keepdims=True))


def test_a_trimmed_prompt_evaluates_only_its_new_turn_and_still_sees_the_kept_ones(llama):
    lines = caller_lines()[:8]
    llama.reset()
    llama.eval(prompt_tokens(llama, SYSTEM + _turns(lines)))
    # The 3 oldest turns dropped; the caller repeats a line from a kept turn, so the new turn leans on them.
    trimmed = prompt_tokens(llama, SYSTEM + _turns(lines[3:]) + REPEAT + lines[5])
    kept = len(prompt_tokens(llama, _turns(lines[3:])))
    moved = reuse_moved_chunks(llama, trimmed)
    assert moved > 0.9 * kept
    n = llama.n_tokens
    assert list(llama.input_ids[:n]) == trimmed[:n]  # what the cache says it holds is the new prompt's start
    assert len(trimmed) - n < 60  # left to evaluate: the new turn
    llama.eval(trimmed[n:])
    reused = _log_probs(llama, n, len(trimmed))
    llama.reset()
    llama.eval(trimmed)
    fresh = _log_probs(llama, n, len(trimmed))
    # KL(fresh || reused) per token of the new turn: ~0.006 here (the moved keys carry a trace of the
    # dropped turns); ~0.4 with the kept turns left at their old positions.
    kl = (np.exp(fresh) * (fresh - reused)).sum(axis=1)
    assert kl.mean() < 0.05, kl.mean()


def test_nothing_moves_when_the_prompt_only_extends_or_shares_nothing(llama):
    lines = caller_lines()[:4]
    llama.reset()
    llama.eval(prompt_tokens(llama, SYSTEM + _turns(lines[:3])))
    cached = llama.n_tokens
    assert reuse_moved_chunks(llama, prompt_tokens(llama, SYSTEM + _turns(lines))) == 0  # a plain next turn
    assert reuse_moved_chunks(llama, prompt_tokens(llama, SYSTEM + _turns(["Something else entirely. " * 12]))) == 0
    assert llama.n_tokens == cached
