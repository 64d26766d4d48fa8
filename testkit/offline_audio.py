"""Audio for offline-transcription tests and benchmarks, built from real recorded speech.

Speech comes from Debian's Asterisk prompts (``testkit.corpus``: 8 kHz telephone recordings
with transcripts). ``speech_track`` strings prompts together with short pauses (a talker who
never stops for long); ``sparse_track`` drops a few prompts into hours of near-silence
(digital silence, or room tone at ``noise_db``), the cheap way to make a 3-hour file that still has words.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path

import numpy as np


@dataclass(frozen=True)
class Placed:
    start_s: float
    end_s: float
    text: str


def _prompts(min_words: int = 3) -> list[tuple[np.ndarray, str]]:
    from asr.offline.decode import decode_file
    from testkit.corpus import prompts

    # "(9 seconds of silence)", 'IAX (note: does not say "2")': stage directions, not words spoken.
    return [(decode_file(p.path, 16000), p.text) for p in prompts(min_words=min_words) if "(" not in p.text]


_CACHE: list[tuple[np.ndarray, str]] = []


def prompt_clips() -> list[tuple[np.ndarray, str]]:
    """Every Asterisk prompt of three words or more, 16 kHz, with its text (cached)."""
    if not _CACHE:
        _CACHE.extend(_prompts())
    return _CACHE


def speech_track(seconds: float, seed: int = 0, rate: int = 16000) -> tuple[np.ndarray, list[Placed]]:
    """About ``seconds`` of continuous speech (pauses of 0.2-0.7 s) and where each prompt sits."""
    rng = random.Random(seed)
    clips = prompt_clips()
    pieces, placed, t = [], [], 0
    while t < seconds * 16000:
        audio, text = clips[rng.randrange(len(clips))]
        gap = np.zeros(int(rng.uniform(0.2, 0.7) * 16000), np.float32)
        placed.append(Placed(t / 16000, (t + len(audio)) / 16000, text))
        pieces += [audio, gap]
        t += len(audio) + len(gap)
    track = np.concatenate(pieces)[: int(seconds * 16000)]
    if rate != 16000:
        import soxr

        track = soxr.resample(track, 16000, rate).astype(np.float32)
    return track, [p for p in placed if p.end_s <= seconds]


def sparse_track(seconds: float, at_s: list[float], rate: int = 8000, noise_db: float | None = None,
                 seed: int = 0) -> tuple[np.ndarray, list[Placed]]:
    """Silence (or room tone at ``noise_db``) for ``seconds`` with one prompt starting at each of ``at_s``."""
    import soxr

    n = int(seconds * rate)
    if noise_db is None:
        track = np.zeros(n, np.float32)
    else:
        rng = np.random.default_rng(seed)
        track = rng.standard_normal(n).astype(np.float32) * np.float32(10 ** (noise_db / 20))
    clips = [c for c in prompt_clips() if len(c[1].split()) >= 6]
    placed = []
    for k, at in enumerate(at_s):
        audio, text = clips[(7 * k + 3) % len(clips)]
        clip = soxr.resample(audio, 16000, rate).astype(np.float32) if rate != 16000 else audio
        i = int(at * rate)
        track[i:i + len(clip)] += clip
        placed.append(Placed(at, at + len(clip) / rate, text))
    return track, placed


def write_audio(path: Path, audio: np.ndarray, rate: int) -> Path:
    """Write mono (n,) or (n, channels) audio by suffix: .wav/.flac/.ogg/.mp3 through libsndfile,
    .m4a through PyAV (AAC, mono)."""
    path = Path(path)
    if path.suffix == ".m4a":
        import av

        with av.open(str(path), "w") as out:
            stream = out.add_stream("aac", rate=rate, layout="mono")
            frame = av.AudioFrame.from_ndarray(audio.reshape(1, -1).astype(np.float32), format="flt", layout="mono")
            frame.sample_rate = rate
            for packet in stream.encode(frame):
                out.mux(packet)
            for packet in stream.encode(None):
                out.mux(packet)
        return path
    import soundfile as sf

    subtype = {".wav": "PCM_16", ".flac": "PCM_16", ".ogg": "VORBIS", ".mp3": "MPEG_LAYER_III"}[path.suffix]
    channels = 1 if audio.ndim == 1 else audio.shape[1]
    # Block by block: libsndfile 1.2 crashes writing a long Vorbis stream in one call.
    with sf.SoundFile(str(path), "w", rate, channels, subtype=subtype) as f:
        for i in range(0, len(audio), rate):
            f.write(audio[i:i + rate])
    return path
