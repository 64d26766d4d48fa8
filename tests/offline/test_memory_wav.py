"""Small 16-bit PCM WAV uploads decoded from memory (asr/offline/memory_wav.py): the very samples ``decode_file``
gives through libsndfile, only complete WAVs of one decode range taken, and the server's answers the same with the
upload in memory as on disk."""

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
from asr.offline.memory_wav import decode_memory_wav, memory_wav


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
    parsed = memory_wav(data)
    assert parsed is not None
    mine, theirs = decode_memory_wav(data, *parsed, 16000), decode_file(path, 16000)
    assert mine.dtype == theirs.dtype == np.float32 and np.array_equal(mine, theirs)


def test_only_complete_16_bit_wavs_of_one_range_are_taken(tmp_path: Path) -> None:
    whole = _wav(tmp_path / "a.wav", 16000, 1, 2.0)
    assert memory_wav(whole) is not None
    assert memory_wav(whole[:-100]) is None  # the data chunk runs past the bytes: libsndfile's rules, on disk
    assert memory_wav(_wav(tmp_path / "b.wav", 16000, 1, 2.0, "PCM_24")) is None
    assert memory_wav(_wav(tmp_path / "c.wav", 16000, 1, 2.0, "FLOAT")) is None
    assert memory_wav(_wav(tmp_path / "d.wav", 16000, 1, 61.0)) is None  # decode_file reads it in two ranges
    flac = io.BytesIO()
    sf.write(flac, np.zeros(16000, np.int16), 16000, format="FLAC")
    assert memory_wav(flac.getvalue()) is None and memory_wav(b"RIFF") is None and memory_wav(b"") is None
    assert memory_wav(_wav(tmp_path / "e.wav", 16000, 1, 0.0)) is None  # no samples: the disk path says so


def test_the_limits_hold_in_memory(tmp_path: Path) -> None:
    data = _wav(tmp_path / "a.wav", 16000, 1, 3.0)
    parsed = memory_wav(data)
    assert parsed is not None
    with pytest.raises(AudioTooLongError):
        decode_memory_wav(data, *parsed, 16000, max_seconds=2.0)
    info, layout = parsed
    lying = type(info)(info.rate, info.channels, info.frames * 1000, info.format, info.subtype)
    with pytest.raises(AudioFileError, match="more than"):  # a header claiming more than the bytes hold
        decode_memory_wav(data, lying, layout, 16000)


def test_the_server_answers_the_same_from_memory_as_from_disk(tmp_path: Path, monkeypatch) -> None:
    """The embedded Whisper over one recorded prompt as a 16 kHz and an 8 kHz stereo WAV, every response format."""
    from agent.models import resolve_engine_spec
    from asr.offline.engine_factory import make_engine
    from asr.offline.server import serve
    from asr.offline.transcriber import OfflineTranscriber
    from asr.offline.window_engine import EngineSpec
    from testkit.offline_audio import prompt_clips

    clip = prompt_clips()[5][0]
    clips = [tmp_path / "mono16k.wav", tmp_path / "stereo8k.wav"]
    sf.write(clips[0], clip, 16000, subtype="PCM_16")
    sf.write(clips[1], np.stack([clip[::2], clip[::2]], axis=1), 8000, subtype="PCM_16")
    assert all(memory_wav(p.read_bytes()) is not None for p in clips)
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
    monkeypatch.setattr(server_module, "decode_memory_wav", lambda *a, **k: decoded.append(1) or decode_memory_wav(*a, **k))
    in_memory = asyncio.run(answers())
    assert len(decoded) == len(clips) * len(formats)  # every request decoded from memory
    monkeypatch.setattr(upload_module, "MAX_BYTES", 0)  # every upload to disk, as before
    on_disk = asyncio.run(answers())
    assert len(decoded) == len(clips) * len(formats)  # ... and none of these
    assert all(status == 200 for status, _ in in_memory) and '"words"' in in_memory[0][1]
    assert in_memory == on_disk
