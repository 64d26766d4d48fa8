"""Read any audio file into mono float32 at a target rate, and write 16-bit WAV.

Decoding is one native PyAV call chain (demux, decode, down-mix, resample in C); a wrong
rate or stereo is converted, never rejected. Empty, missing or non-audio files raise
``AudioFileError`` with a message that names the file and the reason.
"""

from __future__ import annotations

import wave
from pathlib import Path

import numpy as np


class AudioFileError(ValueError):
    """The file cannot be read as audio."""


def load_audio(path: str | Path, sample_rate: int = 16000) -> np.ndarray:
    """Decode ``path`` to mono float32 in [-1, 1] at ``sample_rate``."""
    import av

    p = Path(path)
    if not p.is_file():
        raise AudioFileError(f"{p}: no such file")
    if p.stat().st_size == 0:
        raise AudioFileError(f"{p}: the file is empty")
    try:
        with av.open(str(p)) as container:
            if not container.streams.audio:
                raise AudioFileError(f"{p}: no audio stream in this file")
            stream = container.streams.audio[0]
            resampler = av.AudioResampler(format="flt", layout="mono", rate=sample_rate)
            pieces: list[np.ndarray] = []
            for frame in container.decode(stream):
                for out in resampler.resample(frame):
                    pieces.append(out.to_ndarray().reshape(-1))
            for out in resampler.resample(None):
                pieces.append(out.to_ndarray().reshape(-1))
    except AudioFileError:
        raise
    except (av.error.FFmpegError, UnicodeDecodeError, ValueError) as exc:
        raise AudioFileError(f"{p}: not a readable audio file ({exc})") from None
    if not pieces:
        raise AudioFileError(f"{p}: the audio stream holds no samples")
    audio = np.concatenate(pieces).astype(np.float32, copy=False)
    if audio.size == 0:
        raise AudioFileError(f"{p}: the audio stream holds no samples")
    return audio


def to_pcm16(audio: np.ndarray) -> bytes:
    return (np.clip(audio, -1.0, 1.0) * 32767.0).astype("<i2").tobytes()


def from_pcm16(pcm: bytes) -> np.ndarray:
    return np.frombuffer(pcm, dtype="<i2").astype(np.float32) / 32768.0


def write_wav(path: str | Path, pcm16: bytes, sample_rate: int) -> None:
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(sample_rate)
        w.writeframes(pcm16)
