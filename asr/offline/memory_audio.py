"""Small uploads decoded from memory: no temporary file.

For the length mix's few-second requests a host worker spent more on the disk round trip than on anything else:
the file part written to a temporary file (mkstemp, write, stat, unlink) and read back through libsndfile (open,
info, read): ~40% of a host worker's samples under the sleep engine (fourteenth session's profile). A file part of
at most ``MAX_BYTES`` whose audio is one decode range (under 60 s, so ``decode_file`` reads it in one piece) is kept
in memory and decoded here to the very samples ``decode_file`` gives:

- a complete 16-bit PCM WAV with numpy: int16 / 32768 as libsndfile normalizes, the same down-mix and soxr call;
- any other file libsndfile reads (FLAC, Ogg, other WAVs...) through libsndfile itself, from the bytes
  (its virtual I/O), with the same read, down-mix and soxr call.

Anything else (what only PyAV decodes, a WAV data chunk that runs past the bytes, longer audio) goes to disk.
"""

from __future__ import annotations

import io
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


def memory_audio(data: bytes, out_rate: int = 16000) -> tuple[AudioInfo, PcmLayout | None] | None:
    """What ``data`` holds if it is decoded here; its layout for the numpy path (a complete 16-bit PCM WAV), None
    for libsndfile's; None for the disk."""
    parsed = wav_head(data)
    if parsed is not None:
        info, layout = parsed
        if info.subtype == "PCM_16" and layout.data_offset + info.frames * layout.block_align <= len(data):
            return (info, layout) if 0 < info.frames < one_range_frames(info.rate, out_rate) else None
    sniffed = _sniff(data)
    if sniffed is None or not 0 < sniffed.frames < one_range_frames(sniffed.rate, out_rate):
        return None
    return sniffed, None


def _sniff(data: bytes) -> AudioInfo | None:
    """What libsndfile sees in ``data`` (``decode.probe`` on bytes); None when it cannot open them."""
    import soundfile as sf

    try:
        info = sf.info(io.BytesIO(data))
    except (sf.LibsndfileError, RuntimeError, TypeError):
        return None
    if info.samplerate <= 0 or info.channels <= 0:
        return None
    return AudioInfo(info.samplerate, info.channels, info.frames, info.format, info.subtype)


def decode_memory_audio(data: bytes, info: AudioInfo, layout: PcmLayout | None, out_rate: int = 16000, *,
                        max_seconds: float | None = None) -> np.ndarray:
    """``decode_file``'s samples for a ``memory_audio`` upload; its checks and errors (``AudioFileError``)."""
    _check_plausible(info.duration, info, len(data))
    _check_length(info.duration, max_seconds)
    if layout is not None:
        pcm = np.frombuffer(data, np.int16, count=info.frames * info.channels, offset=layout.data_offset)
        block = pcm.astype(np.float32).reshape(info.frames, info.channels)
        block *= np.float32(1.0 / 0x8000)  # libsndfile's normalization of 16-bit PCM
    else:
        import soundfile as sf

        try:
            with sf.SoundFile(io.BytesIO(data)) as f:  # decode_range's read, from the bytes
                block = f.read(-1, dtype="float32", always_2d=True)
        except (RuntimeError, ValueError) as exc:  # libsndfile errors on a truncated or corrupt body
            raise AudioFileError(f"not a readable audio file ({exc})") from None
    audio = _mono_resampled(block, info.rate, out_rate)
    if audio.size == 0:
        raise AudioFileError("the audio stream holds no samples")
    return audio
