"""The TTS stage's options: the ``[tts]`` config section (``agent.config`` composes it)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class TTSConfig:
    engine: str = "auto"  # auto (piper, else flite) | piper | flite
    voice: str = ""  # piper: model path or name; flite: voice name
    sample_rate: int = 0  # 0: the engine's native rate
    speed: float = 1.0
