"""Token ids to text and words: SentencePiece (``tokenizer.model``) or a tokenizers ``tokenizer.json``."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

from asr.parakeet._deps import require
from asr.words import Word

WORD_START = "\u2581"  # SentencePiece's word-boundary marker


class Tokenizer(Protocol):
    vocab_size: int

    def decode(self, ids: Sequence[int]) -> str: ...

    def piece(self, token_id: int) -> str: ...


class SentencePieceTokenizer:
    """A SentencePiece model file, as NeMo ships it inside ``.nemo`` archives."""

    def __init__(self, model_file: str | Path | None = None, model_bytes: bytes | None = None) -> None:
        spm = require("sentencepiece")
        if model_bytes is None:
            if model_file is None:
                raise ValueError("give a model file or model bytes")
            model_bytes = Path(model_file).read_bytes()
        self.model_bytes = model_bytes
        self._sp = spm.SentencePieceProcessor(model_proto=model_bytes)
        self.vocab_size = int(self._sp.get_piece_size())

    @classmethod
    def from_bytes(cls, data: bytes) -> SentencePieceTokenizer:
        return cls(model_bytes=data)

    def decode(self, ids: Sequence[int]) -> str:
        return self._sp.decode([i for i in ids if 0 <= i < self.vocab_size])

    def piece(self, token_id: int) -> str:
        return self._sp.id_to_piece(token_id) if 0 <= token_id < self.vocab_size else ""

    def encode(self, text: str) -> list[int]:
        return list(self._sp.encode(text))


class JsonTokenizer:
    """A transformers ``tokenizer.json`` (what converted Hugging Face checkpoints ship)."""

    def __init__(self, json_file: str | Path, vocab_size: int | None = None) -> None:
        tokenizers = require("tokenizers")
        self.path = Path(json_file)
        self._tok = tokenizers.Tokenizer.from_file(str(json_file))
        self.vocab_size = int(vocab_size or self._tok.get_vocab_size(with_added_tokens=False))

    def decode(self, ids: Sequence[int]) -> str:
        return self._tok.decode([i for i in ids if 0 <= i < self.vocab_size], skip_special_tokens=True).strip()

    def piece(self, token_id: int) -> str:
        return self._tok.id_to_token(token_id) or ""

    def encode(self, text: str) -> list[int]:
        return list(self._tok.encode(text, add_special_tokens=False).ids)


def load_tokenizer(folder: str | Path, vocab_size: int | None = None) -> Tokenizer:
    """Prefer ``tokenizer.model`` (SentencePiece), else ``tokenizer.json``."""
    folder = Path(folder)
    spm_file = folder / "tokenizer.model"
    if spm_file.is_file():
        return SentencePieceTokenizer(spm_file)
    json_file = folder / "tokenizer.json"
    if json_file.is_file():
        return JsonTokenizer(json_file, vocab_size)
    raise FileNotFoundError(f"{folder}: no tokenizer.model or tokenizer.json")


def group_words(
    tokenizer: Tokenizer, tokens: Sequence[int], frames: Sequence[int], durations: Sequence[int],
    frame_s: float, offset_s: float = 0.0,
) -> list[Word]:
    """Split a token sequence at SentencePiece word starts and time each word."""
    words: list[Word] = []
    current: list[int] = []
    start = end = 0.0
    for tok, frame, dur in zip(tokens, frames, durations, strict=True):
        piece = tokenizer.piece(tok)
        if current and piece.startswith(WORD_START):
            text = tokenizer.decode(current).strip()
            if text:
                words.append(Word(start, end, text))
            current = []
        if not current:
            start = offset_s + frame * frame_s
        current.append(tok)
        end = offset_s + (frame + max(dur, 1)) * frame_s
    if current:
        text = tokenizer.decode(current).strip()
        if text:
            words.append(Word(start, end, text))
    return words
