"""torch.compile's caches carried between machines: ``$CADENCE_COMPILE_CACHE`` names a folder.

Every process that compiles (the Parakeet encoders, Kokoro's fused kernels) loads each ``*.bin`` file of that
folder before its first ``torch.compile`` (``restore``) and, after each warm-up, writes what it compiled and
used to a file there (``save``, ``torch.compiler.save_cache_artifacts``: Inductor's graphs, Triton's kernels,
the autotuning results), unless another file already holds all of it. A fresh machine that finds the files
skips the codegen and kernel builds of every shape it has seen (on the H200, 60-200 s of warm-up per engine
otherwise). Unset, both are no-ops and torch is not imported. A file that does not load (another torch, a
truncated copy) is logged and skipped: a stale cache costs the compile time, never the process.
"""

from __future__ import annotations

import hashlib
import json
import logging
import lzma
import os
from pathlib import Path

log = logging.getLogger(__name__)

ENV = "CADENCE_COMPILE_CACHE"
SUFFIX, KEYS = ".bin", ".keys"
_state = {"restored": False}


def folder() -> Path | None:
    """The cache folder, or None when ``$CADENCE_COMPILE_CACHE`` is unset or empty."""
    value = os.environ.get(ENV, "").strip()
    return Path(value) if value else None


def restore() -> int:
    """Load every cache file of the folder, once per process; the number that loaded."""
    where = folder()
    if where is None or _state["restored"]:
        return 0
    _state["restored"] = True
    if not where.is_dir():
        return 0
    import torch

    loaded = 0
    for path in sorted(where.glob(f"*{SUFFIX}")):
        try:
            torch.compiler.load_cache_artifacts(lzma.decompress(path.read_bytes()))
        except Exception as exc:  # noqa: BLE001 - any unreadable file is skipped, whatever torch raises
            log.warning("compile cache %s not loaded (%s: %s); it will be compiled again", path, type(exc).__name__,
                        exc)
            continue
        loaded += 1
    if loaded:
        log.info("compile cache: %d file(s) loaded from %s", loaded, where)
    return loaded


def save(role: str) -> Path | None:
    """Write the artifacts this process compiled or loaded and used (``torch.compiler.save_cache_artifacts``) to
    ``ROLE-HASH.bin`` in the folder, with their keys beside it (``.keys``), unless a file there already holds
    all of them; files whose keys this one covers are removed. None when unset or nothing was written."""
    where = folder()
    if where is None:
        return None
    import torch

    artifacts = torch.compiler.save_cache_artifacts()
    if artifacts is None:
        return None
    data, info = artifacts
    keys = sorted(f"{kind}:{key}" for kind, names in info.artifacts.items() for key in names)
    mine = set(keys)
    where.mkdir(parents=True, exist_ok=True)
    held = _held_keys(where)
    if any(mine <= other for other in held.values()):
        return None
    stem = f"{role}-{hashlib.sha1(chr(10).join(keys).encode()).hexdigest()[:12]}"
    path = where / f"{stem}{SUFFIX}"
    tmp = where / f"{stem}.tmp"
    tmp.write_bytes(lzma.compress(data, preset=1))
    tmp.replace(path)  # a reader never sees half a file
    (where / f"{stem}{KEYS}").write_text(json.dumps(keys))
    for other, other_keys in held.items():  # files this one covers
        if other_keys <= mine:
            for stale in (where / f"{other}{SUFFIX}", where / f"{other}{KEYS}"):
                stale.unlink(missing_ok=True)
    log.info("compile cache: %s (%.1f MB, %d artifacts)", path, path.stat().st_size / 1e6, len(keys))
    return path


def _held_keys(where: Path) -> dict[str, set[str]]:
    """The key set of each cache file in ``where`` that has its ``.keys`` beside it, by file stem."""
    held: dict[str, set[str]] = {}
    for path in where.glob(f"*{KEYS}"):
        stem = path.name.removesuffix(KEYS)
        try:
            if (where / f"{stem}{SUFFIX}").exists():
                held[stem] = set(json.loads(path.read_text()))
        except (OSError, ValueError):
            continue
    return held
