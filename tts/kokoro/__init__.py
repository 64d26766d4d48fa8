"""Kokoro-82M (StyleTTS2 + ISTFTNet, 24 kHz) as Cadence's GPU TTS engine: batched, clause-streamed.

``KokoroOptions`` (standard library only) configures ``tts.kokoro.engine.KokoroEngine``; the engine
needs torch (``pip install 'cadence[gputts]'``) and, for real phonemes, Debian's ``espeak-ng``.
"""

from tts.kokoro.options import KokoroOptions

__all__ = ["KokoroOptions"]
