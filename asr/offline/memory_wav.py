"""Small 16-bit PCM WAV uploads decoded from memory: no temporary file, no libsndfile.

For the length mix's few-second requests a host worker spent more on the disk round trip than on anything else:
the file part written to a temporary file (mkstemp, write, stat, unlink) and read back through libsndfile (open,
info, read): ~40% of a host worker's samples under the sleep engine (fourteenth session's profile). An upload
whose file part is a complete 16-bit PCM WAV of one decode range (at most 60 s, so ``decode_file`` reads it in one
piece) is kept in memory and decoded here to the very samples ``decode_file`` gives: int16 / 32768 as libsndfile
normalizes, then the same down-mix and soxr call. Anything else (other formats, other sample widths, a data
chunk that runs past the bytes, longer audio) goes to disk as before.
"""

from __future__ import annotations

import math

import numpy as np

from asr.offline.decode import (
    AudioFileError,
    AudioInfo,
    PcmLayout,
    _check_length,
    _check_plausible,
    _mono_resampled,
    wav_head,
)

MAX_BYTES = 4 << 20  # file parts up to this size are read into memory first (then spilled to disk if not eligible)
INLINE_SAMPLES = 1 << 19  # decoded on the event loop up to this many samples at the engine's rate (no resample)
CHUNK_S = 60.0  # decode_file's range: a file of at most one range is read in one piece


def one_range_frames(rate: int, out_rate: int = 16000, chunk_s: float = CHUNK_S) -> int:
    """The most input frames ``decode_file`` reads as one range (its ``DecodeStream`` chunk)."""
    period = rate // math.gcd(rate, out_rate)
    return max(period, int(chunk_s * rate) // period * period)


def memory_wav(data: bytes, out_rate: int = 16000) -> tuple[AudioInfo, PcmLayout] | None:
    """What ``data`` holds if it is decoded here (a complete 16-bit PCM WAV of one decode range); else None."""
    parsed = wav_head(data)
    if parsed is None:
        return None
    info, layout = parsed
    if (info.subtype != "PCM_16" or info.frames <= 0 or info.frames >= one_range_frames(info.rate, out_rate)
            or layout.data_offset + info.frames * layout.block_align > len(data)):
        return None
    return info, layout


def decode_memory_wav(data: bytes, info: AudioInfo, layout: PcmLayout, out_rate: int = 16000, *,
                      max_seconds: float | None = None) -> np.ndarray:
    """``decode_file``'s samples for a ``memory_wav`` upload; its checks and errors (``AudioFileError``)."""
    _check_plausible(info.duration, info, len(data))
    _check_length(info.duration, max_seconds)
    pcm = np.frombuffer(data, np.int16, count=info.frames * info.channels, offset=layout.data_offset)
    block = pcm.astype(np.float32).reshape(info.frames, info.channels)
    block *= np.float32(1.0 / 0x8000)  # libsndfile's normalization of 16-bit PCM
    audio = _mono_resampled(block, info.rate, out_rate)
    if audio.size == 0:
        raise AudioFileError("the audio stream holds no samples")
    return audio
