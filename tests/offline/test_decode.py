"""Native decode: parallel time ranges join exactly; formats, down-mix, limits and bad files."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from asr.offline.decode import AudioTooLongError, decode_file, probe
from testkit.offline_audio import write_audio
from transports.audio_io import AudioFileError, load_audio


def stereo(seconds: float, rate: int) -> np.ndarray:
    t = np.arange(int(seconds * rate)) / rate
    left = 0.3 * np.sin(2 * np.pi * 440 * t) * (0.5 + 0.5 * np.sin(2 * np.pi * 0.3 * t))
    right = 0.05 * np.random.default_rng(0).standard_normal(len(t))
    return np.stack([left, right], axis=1).astype(np.float32)


@pytest.mark.parametrize("suffix", [".wav", ".flac", ".ogg", ".mp3"])
def test_parallel_ranges_join_exactly(tmp_path: Path, suffix: str) -> None:
    path = write_audio(tmp_path / f"music{suffix}", stereo(40, 44100), 44100)
    serial = decode_file(path, 16000, chunk_s=1e9)
    parallel = decode_file(path, 16000, chunk_s=5.0)  # eight ranges
    assert len(parallel) == len(serial)
    assert abs(len(serial) / 16000 - probe(path).duration) < 0.01
    assert float(np.max(np.abs(parallel - serial))) < 1e-6


def test_native_matches_the_pyav_loop(tmp_path: Path) -> None:
    import soundfile as sf

    path = tmp_path / "tone.flac"
    sf.write(str(path), stereo(20, 48000), 48000, subtype="PCM_16")
    native, looped = decode_file(path, 16000), load_audio(path, 16000)
    n = min(len(native), len(looped))
    assert abs(len(native) - len(looped)) <= 64
    assert np.corrcoef(native[1000:n - 1000], looped[1000:n - 1000])[0, 1] > 0.999


def test_down_mix_averages_channels(tmp_path: Path) -> None:
    import soundfile as sf

    x = 0.5 * np.sin(2 * np.pi * 200 * np.arange(16000) / 16000).astype(np.float32)
    path = tmp_path / "lr.wav"
    sf.write(str(path), np.stack([x, np.zeros_like(x)], axis=1), 16000, subtype="FLOAT")
    assert np.allclose(decode_file(path, 16000), 0.5 * x, atol=1e-6)


def test_containers_libsndfile_cannot_read_fall_back_to_pyav(tmp_path: Path) -> None:
    path = write_audio(tmp_path / "clip.m4a", stereo(5, 16000)[:, 0].copy(), 16000)
    assert probe(path) is None
    audio = decode_file(path, 16000)
    assert abs(len(audio) / 16000 - 5.0) < 0.2  # AAC adds encoder delay and frame padding


def test_bad_files_and_limits(tmp_path: Path) -> None:
    empty = tmp_path / "empty.wav"
    empty.write_bytes(b"")
    with pytest.raises(AudioFileError, match="empty"):
        decode_file(empty)
    junk = tmp_path / "junk.ogg"
    junk.write_bytes(b"OggS" + bytes(500))
    with pytest.raises(AudioFileError, match="not a readable audio file"):
        decode_file(junk)
    import soundfile as sf

    long = tmp_path / "long.flac"
    sf.write(str(long), np.zeros(8000 * 120, np.float32), 8000, subtype="PCM_16")
    with pytest.raises(AudioTooLongError, match="120 s"):
        decode_file(long, max_seconds=60)
