"""The TTS stage's options: the ``[tts]`` config section (``agent.config`` composes it)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class TTSConfig:
    engine: str = "auto"  # auto (piper, else flite) | piper | flite
    voice: str = ""  # piper: model path or name; flite: voice name
    sample_rate: int = 0  # 0: the engine's native rate
    speed: float = 1.0
    # The bot's fixed phrases (call.greeting, idle prompt, goodbyes, filler, llm.apology / empty_reply) synthesized
    # once per process and replayed on every later call (tts/phrase_cache.py). False: synthesized every time.
    cache_phrases: bool = True
    # A reply's first clause is sent to synthesis at its first , ; : once it has 2 words, else at a word boundary
    # after this many words (the caller's first audio waits for them to arrive token by token).
    first_clause_max_words: int = 12
    # The Kokoro GPU engine (engine = "kokoro"; tts.kokoro.options.KokoroOptions has the reasoning):
    kokoro_dtype: str = "auto"  # the convolutional decoder's dtype: auto (float32) | bfloat16 | float16
    kokoro_compile: bool = False  # torch.compile the decoder's fused AdaIN/Snake steps (built during warm-up)
    kokoro_max_batch: int = 64  # utterances per GPU call
    kokoro_cuda_graphs: bool = False  # replay the decoder from CUDA graphs per (batch, frames) bucket
    kokoro_text_graphs: bool = True  # with kokoro_cuda_graphs: the text side from graphs per (batch, tokens) too
    kokoro_graph_plan: str = "cost"  # with kokoro_cuda_graphs: cost (least timed replays per batch) | fewest
    # A lane of its own (thread, high-priority CUDA stream, graphs) for streams' first clauses (KokoroOptions.first_lane)
    kokoro_first_lane: bool = False
    kokoro_work_ahead_phonemes: int = 0  # a tick with nothing due soon stops at this many phoneme ids (0: no cap)
