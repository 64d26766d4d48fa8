"""Where speech ends in a clip: the last voiced 10 ms frame (an energy rule, not the file's end)."""

from __future__ import annotations

import numpy as np

VOICED_DB = -35.0  # a 10 ms frame is voiced within 35 dB of the utterance's loudest frame
VOICED_FLOOR = 3e-4  # ... and above this RMS (digital near-silence never counts)


def last_voiced_s(audio: np.ndarray, rate: int = 16000) -> float:
    """Seconds from the start to the end of the last voiced 10 ms frame (0.0 if none is voiced)."""
    hop = rate // 100
    n = len(audio) // hop
    if n == 0:
        return 0.0
    rms = np.sqrt(np.mean(audio[: n * hop].reshape(n, hop).astype(np.float64) ** 2, axis=1))
    threshold = max(VOICED_FLOOR, float(rms.max()) * 10 ** (VOICED_DB / 20))
    voiced = np.nonzero(rms > threshold)[0]
    return float((voiced[-1] + 1) * hop / rate) if len(voiced) else 0.0
