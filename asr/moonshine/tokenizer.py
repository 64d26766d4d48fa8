"""Token ids to text for Moonshine's SentencePiece-style BPE vocabulary (decoding only, no dependencies).

Two vocabulary files are read: ``tokenizer.bin`` (what moonshine-voice ships: one length-prefixed byte
string per id, byte-fallback tokens as the raw byte) and Hugging Face's ``tokenizer.json`` (other
Moonshine exports; byte-fallback tokens written ``<0xNN>``). Decoding joins the pieces' bytes, turns
``▁`` into a space and drops the one leading space, as the reference tokenizer's decoder does.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

SPACE = "\u2581".encode()
_SPECIAL = re.compile(rb"<<[^<>]+>>|<[^<>]+>")
_BYTE_PIECE = re.compile(r"<0x([0-9A-Fa-f]{2})>")


class TokenizerError(ValueError):
    """A vocabulary file that cannot be read."""


def _read_bin(data: bytes) -> list[bytes]:
    """``tokenizer.bin``: per id a length (one byte, or two when the first is >= 128), then the bytes."""
    pieces, i = [], 0
    while i < len(data):
        n = data[i]
        i += 1
        if n >= 128:
            if i >= len(data):
                raise TokenizerError("tokenizer.bin ends inside a length")
            n = n - 128 + data[i] * 128
            i += 1
        if i + n > len(data):
            raise TokenizerError("tokenizer.bin ends inside a token")
        pieces.append(data[i:i + n])
        i += n
    return pieces


def _read_json(text: str) -> tuple[list[bytes], set[int]]:
    """``tokenizer.json`` (a BPE model): the pieces by id and the ids of its special added tokens."""
    spec = json.loads(text)
    vocab = spec["model"]["vocab"]
    specials = {t["id"] for t in spec.get("added_tokens", []) if t.get("special")}
    size = 1 + max([*vocab.values(), *specials])
    pieces = [b""] * size
    for piece, i in vocab.items():
        byte = _BYTE_PIECE.fullmatch(piece)
        pieces[i] = bytes([int(byte.group(1), 16)]) if byte else piece.encode()
    for t in spec.get("added_tokens", []):
        pieces[t["id"]] = t["content"].encode()
    return pieces, specials


class MoonshineTokenizer:
    """Decodes token ids; special tokens (``<s>``, ``</s>``, ``<<ST_n>>`` ...) are left out."""

    def __init__(self, pieces: list[bytes], special_ids: set[int]):
        self.pieces = pieces
        self.special_ids = frozenset(special_ids)

    @classmethod
    def load(cls, path: str | Path) -> MoonshineTokenizer:
        """Read ``tokenizer.bin`` or ``tokenizer.json``."""
        p = Path(path)
        try:
            if p.suffix == ".json":
                pieces, specials = _read_json(p.read_text())
            else:
                pieces = _read_bin(p.read_bytes())
                # multi-byte pieces that are whole <tag>s; single bytes are byte-fallback tokens
                specials = {i for i, b in enumerate(pieces) if len(b) > 2 and _SPECIAL.fullmatch(b)}
        except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError) as exc:
            raise TokenizerError(f"cannot read the Moonshine vocabulary {p}: {exc}") from exc
        if len(pieces) < 3:
            raise TokenizerError(f"{p} holds {len(pieces)} tokens: not a Moonshine vocabulary")
        return cls(pieces, specials)

    def __len__(self) -> int:
        return len(self.pieces)

    def decode(self, ids: list[int]) -> str:
        raw = b"".join(self.pieces[i] for i in ids if i not in self.special_ids and 0 <= i < len(self.pieces))
        text = raw.replace(SPACE, b" ").decode("utf-8", errors="replace")
        return text[1:] if text.startswith(" ") else text
