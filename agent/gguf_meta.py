"""Read a GGUF file's metadata (its key/value header) without its tensors, for sizing a llama-server.

Only what the memory plan needs is interpreted: the architecture's block count, attention head counts and
widths, and the vocabulary size (the length of ``tokenizer.ggml.tokens``). Array values are skipped, not
kept (a 128k-token vocabulary is counted, not decoded). A file that is not GGUF, or is cut short, raises
``GGUFError`` naming the file.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

MAGIC = b"GGUF"
# value type -> struct format of a scalar (8: string, 9: array)
SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
STRING, ARRAY = 8, 9


class GGUFError(ValueError):
    """Not a readable GGUF file."""


@dataclass(frozen=True)
class GGUFModel:
    path: Path
    arch: str
    n_layer: int
    n_embd: int
    n_head: int
    n_head_kv: int
    head_dim_k: int
    head_dim_v: int
    n_vocab: int
    file_bytes: int

    def kv_bytes_per_token(self, bytes_per_value: int = 2) -> int:
        """K and V of one token over every layer (f16 cache: 2 bytes a value)."""
        return self.n_layer * self.n_head_kv * (self.head_dim_k + self.head_dim_v) * bytes_per_value


def _read(f: IO[bytes], fmt: str) -> Any:
    size = struct.calcsize(fmt)
    data = f.read(size)
    if len(data) != size:
        raise EOFError
    return struct.unpack(fmt, data)[0]


def _string(f: IO[bytes]) -> str:
    n = _read(f, "<Q")
    data = f.read(n)
    if len(data) != n:
        raise EOFError
    return data.decode("utf-8", errors="replace")


def _value(f: IO[bytes], vtype: int) -> Any:
    if vtype in SCALARS:
        return _read(f, SCALARS[vtype])
    if vtype == STRING:
        return _string(f)
    if vtype == ARRAY:
        itype, count = _read(f, "<I"), _read(f, "<Q")
        if itype in SCALARS:
            f.seek(struct.calcsize(SCALARS[itype]) * count, 1)
        elif itype == STRING:
            for _ in range(count):
                f.seek(_read(f, "<Q"), 1)
        else:
            for _ in range(count):
                _value(f, itype)
        return count  # an array is reported by its length only
    raise GGUFError(f"unknown GGUF value type {vtype}")


def read_metadata(path: Path | str) -> dict[str, Any]:
    """Every key of the header; arrays as their lengths."""
    path = Path(path)
    try:
        with open(path, "rb") as f:
            if f.read(4) != MAGIC:
                raise GGUFError(f"{path} is not a GGUF file (no GGUF magic)")
            version = _read(f, "<I")
            if version < 2:
                raise GGUFError(f"{path}: GGUF version {version} is too old (2 or later)")
            _read(f, "<Q")  # tensor count
            n_kv = _read(f, "<Q")
            meta: dict[str, Any] = {}
            for _ in range(n_kv):
                key = _string(f)
                meta[key] = _value(f, _read(f, "<I"))
            return meta
    except EOFError:
        raise GGUFError(f"{path} is cut short inside its GGUF header") from None
    except OSError as exc:
        raise GGUFError(f"cannot read {path}: {exc}") from None


def read_model(path: Path | str) -> GGUFModel:
    """The shape numbers of a GGUF model (see ``GGUFModel``)."""
    path = Path(path)
    meta = read_metadata(path)
    arch = str(meta.get("general.architecture", ""))

    def get(key: str, default: int | None = None) -> int:
        value = meta.get(f"{arch}.{key}", default)
        if value is None:
            raise GGUFError(f"{path}: no {arch}.{key} in its metadata")
        return int(value)

    n_embd, n_head = get("embedding_length"), get("attention.head_count")
    n_head_kv = get("attention.head_count_kv", n_head)
    head_dim = n_embd // max(1, n_head)
    return GGUFModel(path, arch, get("block_count"), n_embd, n_head, n_head_kv, get("attention.key_length", head_dim),
                     get("attention.value_length", head_dim), int(meta.get("tokenizer.ggml.tokens", 0)),
                     path.stat().st_size)
