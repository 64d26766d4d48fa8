"""Build the offline engine an ``EngineSpec`` names; heavy libraries are imported only here.

Kept apart from ``window_engine`` (the contract every engine imports) so no engine module and
the factory import each other.
"""

from __future__ import annotations

from asr.offline.window_engine import EngineSpec, WindowEngine, parakeet_backend


def make_engine(spec: EngineSpec) -> WindowEngine:
    """Build the engine ``spec`` names; heavy libraries are imported here, not before."""
    if spec.engine == "whisper":
        from asr.offline.whisper_engine import WhisperWindowEngine

        return WhisperWindowEngine.load(spec)
    if spec.engine == "parakeet":
        if parakeet_backend(spec) == "fast":
            from asr.offline.parakeet_fast import FastParakeetWindowEngine

            return FastParakeetWindowEngine.load(spec)
        from asr.offline.parakeet_engine import ParakeetWindowEngine

        return ParakeetWindowEngine.load(spec)
    raise ValueError(f"unknown engine {spec.engine!r}: expected whisper or parakeet")
