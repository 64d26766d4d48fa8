"""Small uploads decoded from memory (asr/offline/memory_audio.py): the very samples ``decode_file`` gives from disk
(16-bit PCM WAVs with numpy, other files through libsndfile from the bytes), only audio of one decode range taken,
and the server's answers the same with the upload in memory as on disk."""

from __future__ import annotations

import asyncio
import io
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
from aiohttp import ClientSession, FormData

from asr.offline import upload as upload_module
from asr.offline.decode import AudioFileError, AudioTooLongError, decode_file
from asr.offline.memory_audio import decode_memory_audio, memory_audio


def _wav(path: Path, rate: int, channels: int, seconds: float, subtype: str = "PCM_16", seed: int = 0) -> bytes:
    rng = np.random.default_rng(seed)
    pcm = rng.integers(-32768, 32768, size=(int(rate * seconds), channels), dtype=np.int16)
    pcm[:2, 0] = (-32768, 32767)[:len(pcm)]  # both ends of the range
    sf.write(path, pcm, rate, subtype=subtype)
    return path.read_bytes()


@pytest.mark.parametrize(("rate", "channels", "seconds"), [(16000, 1, 5.0), (8000, 1, 3.3), (44100, 2, 2.0),
                                                           (22050, 2, 7.7), (16000, 1, 59.0)])
def test_the_same_samples_as_libsndfile(tmp_path: Path, rate: int, channels: int, seconds: float) -> None:
    path = tmp_path / "clip.wav"
    data = _wav(path, rate, channels, seconds)
    parsed = memory_audio(data)
    assert parsed is not None
    mine, theirs = decode_memory_audio(data, *parsed, 16000), decode_file(path, 16000)
    assert mine.dtype == theirs.dtype == np.float32 and np.array_equal(mine, theirs)


@pytest.mark.parametrize(("fmt", "subtype"), [("WAV", "PCM_24"), ("WAV", "FLOAT"), ("FLAC", None), ("OGG", None)])
def test_other_files_through_libsndfile_from_the_bytes(tmp_path: Path, fmt: str, subtype: str | None) -> None:
    rng = np.random.default_rng(3)
    clip = (np.sin(np.arange(16000 * 3) * 0.05) * 0.3 + rng.normal(0, 0.02, 16000 * 3)).astype(np.float32)
    path = tmp_path / f"clip.{fmt.lower()}"
    sf.write(path, np.stack([clip, clip[::-1]], axis=1), 22050, format=fmt, subtype=subtype)
    data = path.read_bytes()
    parsed = memory_audio(data)
    assert parsed is not None and parsed[1] is None  # libsndfile's path, not the WAV one
    assert np.array_equal(decode_memory_audio(data, *parsed, 16000), decode_file(path, 16000))


def test_only_audio_of_one_decode_range_is_taken(tmp_path: Path) -> None:
    whole = _wav(tmp_path / "a.wav", 16000, 1, 2.0)
    parsed = memory_audio(whole)
    assert parsed is not None and parsed[1] is not None  # the numpy path
    cut = tmp_path / "cut.wav"
    cut.write_bytes(whole[:-100])  # the data chunk runs past the bytes: libsndfile reads what is there, as on disk
    parsed = memory_audio(cut.read_bytes())
    assert parsed is not None and parsed[1] is None
    assert np.array_equal(decode_memory_audio(cut.read_bytes(), *parsed, 16000), decode_file(cut, 16000))
    assert memory_audio(_wav(tmp_path / "d.wav", 16000, 1, 61.0)) is None  # decode_file reads it in two ranges
    flac = io.BytesIO()
    sf.write(flac, np.zeros(16000 * 61, np.int16), 16000, format="FLAC")
    assert memory_audio(flac.getvalue()) is None  # the same for any format
    assert memory_audio(b"RIFF") is None and memory_audio(b"") is None and memory_audio(b"not audio" * 100) is None
    assert memory_audio(_wav(tmp_path / "e.wav", 16000, 1, 0.0)) is None  # no samples: the disk path says so


def test_the_limits_hold_in_memory(tmp_path: Path) -> None:
    data = _wav(tmp_path / "a.wav", 16000, 1, 3.0)
    parsed = memory_audio(data)
    assert parsed is not None
    with pytest.raises(AudioTooLongError):
        decode_memory_audio(data, *parsed, 16000, max_seconds=2.0)
    info, layout = parsed
    lying = type(info)(info.rate, info.channels, info.frames * 1000, info.format, info.subtype)
    with pytest.raises(AudioFileError, match="more than"):  # a header claiming more than the bytes hold
        decode_memory_audio(data, lying, layout, 16000)


def test_the_server_answers_the_same_from_memory_as_from_disk(tmp_path: Path, monkeypatch) -> None:
    """The embedded Whisper over one recorded prompt as a 16 kHz WAV, an 8 kHz stereo WAV and a FLAC, every
    response format."""
    from agent.models import resolve_engine_spec
    from asr.offline.engine_factory import make_engine
    from asr.offline.server import serve
    from asr.offline.transcriber import OfflineTranscriber
    from asr.offline.window_engine import EngineSpec
    from testkit.offline_audio import prompt_clips

    clip = prompt_clips()[5][0]
    clips = [tmp_path / "mono16k.wav", tmp_path / "stereo8k.wav", tmp_path / "mono16k.flac"]
    sf.write(clips[0], clip, 16000, subtype="PCM_16")
    sf.write(clips[1], np.stack([clip[::2], clip[::2]], axis=1), 8000, subtype="PCM_16")
    sf.write(clips[2], clip, 16000, format="FLAC")
    assert all(memory_audio(p.read_bytes()) is not None for p in clips)
    engine = make_engine(resolve_engine_spec(EngineSpec()))
    formats = [{"response_format": "verbose_json", "timestamp_granularities[]": "word"}, {"response_format": "text"},
               {"response_format": "json", "stream": "true"}]

    async def answers() -> list[tuple[int, str]]:
        stop, ready = asyncio.Event(), asyncio.get_running_loop().create_future()
        task = asyncio.ensure_future(serve(OfflineTranscriber(engine), "127.0.0.1", 0, on_ready=ready.set_result,
                                           stop=stop))
        url = await ready
        got = []
        async with ClientSession() as session:
            for path in clips:
                for fields in formats:
                    form = FormData()
                    form.add_field("file", path.read_bytes(), filename=path.name)
                    for k, v in {"model": "whisper-1", **fields}.items():
                        form.add_field(k, v)
                    async with session.post(url + "/v1/audio/transcriptions", data=form) as r:
                        got.append((r.status, await r.text()))
        stop.set()
        await task
        return got

    import asr.offline.server as server_module

    decoded = []
    monkeypatch.setattr(server_module, "decode_memory_audio", lambda *a, **k: decoded.append(1) or decode_memory_audio(*a, **k))
    in_memory = asyncio.run(answers())
    assert len(decoded) == len(clips) * len(formats)  # every request decoded from memory
    monkeypatch.setattr(upload_module, "MAX_BYTES", 0)  # every upload to disk, as before
    on_disk = asyncio.run(answers())
    assert len(decoded) == len(clips) * len(formats)  # ... and none of these
    assert all(status == 200 for status, _ in in_memory) and '"words"' in in_memory[0][1]
    assert in_memory == on_disk
