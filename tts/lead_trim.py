"""Cut the near-silence a TTS voice puts before a reply's first word.

Piper starts every utterance with 25-65 ms of near-zero samples (|x| < 10) before the voice rises;
at the start of a reply that is pure added latency for the caller. ``trim_leading_silence`` drops
it, keeping ``keep_ms`` before the first sample above ``level`` so the onset is not clipped.
"""

from __future__ import annotations

import numpy as np

LEVEL = 30  # int16: about -61 dBFS, well under any speech onset and above Piper's leading floor
KEEP_MS = 5.0


def trim_leading_silence(pcm: bytes, sample_rate: int, level: int = LEVEL, keep_ms: float = KEEP_MS) -> bytes:
    """``pcm`` (16-bit mono) without its leading quiet, but ``keep_ms`` of it; empty if it is all quiet."""
    if sample_rate <= 0:
        raise ValueError(f"sample_rate must be positive, got {sample_rate}")
    samples = np.frombuffer(pcm[: len(pcm) - len(pcm) % 2], dtype=np.int16)
    loud = np.flatnonzero(np.abs(samples.astype(np.int32)) > level)
    if loud.size == 0:
        return b""
    start = max(0, int(loud[0]) - int(sample_rate * keep_ms / 1000.0))
    return pcm[2 * start:]
