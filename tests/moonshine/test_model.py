"""Moonshine tiny-en on ONNX Runtime (``asr.moonshine.model``): real model, real recorded speech."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from agent.models import resolve_moonshine_path
from asr.moonshine.model import (
    EOS_TOKEN,
    MoonshineModel,
    MoonshineModelError,
    max_tokens,
    split_windows,
)
from asr.moonshine.tokenizer import MoonshineTokenizer
from asr.options import ASRConfig
from testkit.corpus import wer
from testkit.talk_clips import recorded_phrase, talk_clips

CLIPS = ["hello", "vm-goodbye", "agent-pass", "conf-onlyperson", "ss-noservice", "pbx-invalid"]
JOINED = [("conf-getpin", "vm-toforward")]  # "Press 8": Moonshine writes the digit or the word
# Moonshine tiny-en gets these clips word for word today; one wrong word in a five-word prompt is 20%.
CLIP_WER_MAX = 0.2


@pytest.fixture(scope="module")
def clips():
    return talk_clips(16000, single=CLIPS, joined=JOINED)


def test_recorded_prompts_are_transcribed(model, clips):
    for clip in clips:
        text = model.transcribe(clip.audio)
        assert wer(clip.text, text) <= CLIP_WER_MAX, (clip.name, text)


def test_each_transcript_ends_on_the_end_token_within_the_bound(model, clips):
    """The bound (6.5 tokens/s + 6) leaves room: every clip's decode stops on its own, and a lower
    bound cuts the decode there."""
    for clip in clips:
        limit = max_tokens(len(clip.audio) / 16000)
        decoded = model.generate(clip.audio, limit)
        tokens = decoded.tokens
        assert 0 < len(tokens) < limit and EOS_TOKEN not in tokens and decoded.stopped, (clip.name, tokens)
        cut = model.generate(clip.audio, 2)
        assert cut.tokens == tokens[:2] and not cut.stopped and cut.min_prob >= decoded.min_prob
    assert max_tokens(10.0) == 71 and max_tokens(1.0) == 12


def test_silence_noise_and_a_tone_give_no_text(model):
    """Followed by silence (as the service pads every segment), these make Moonshine write a bare "You":
    taken for no speech. A spoken "you" is kept."""
    rng = np.random.default_rng(0)
    t = np.arange(16000) / 16000
    pad = np.zeros(8000)
    for audio in (np.zeros(16000), rng.normal(0, 0.01, 16000), rng.normal(0, 0.05, 16000),
                  0.1 * np.sin(2 * np.pi * 440 * t)):
        audio = np.concatenate([audio, pad]).astype(np.float32)
        assert model.tokenizer.decode(model.generate(audio, 10).tokens) == "You", "the model's no-speech output changed"
        assert model.transcribe(audio) == ""
    assert model.transcribe(np.zeros(800, np.float32)) == ""  # 50 ms: below Moonshine's 0.1 s
    said = recorded_phrase(["vm-youhave"])
    assert said.text.lower().startswith("you") and model.transcribe(said.audio).lower().startswith("you")


def test_a_wrong_sample_rate_is_refused(model, clips):
    with pytest.raises(ValueError, match=r"16000 Hz audio, got 8000 Hz"):
        model.transcribe(clips[0].audio[::2], sample_rate=8000)


def test_long_audio_is_cut_at_pauses(model):
    """17 s of speech in windows of at most 5 s: each cut falls where it is quiet, so no word is lost."""
    phrase = recorded_phrase(["agent-pass", "conf-onlyperson", "ss-noservice", "pbx-invalid"], gap_s=0.4)
    audio = phrase.audio
    windows = split_windows(audio, 5 * 16000)
    assert len(windows) >= 4 and sum(map(len, windows)) == len(audio)
    rms = float(np.sqrt(np.mean(audio ** 2)))
    for cut in np.cumsum([len(w) for w in windows])[:-1]:
        assert float(np.sqrt(np.mean(audio[cut - 160:cut + 160] ** 2))) < 0.05 * rms, cut / 16000
    assert max(map(len, windows)) <= 5 * 16000
    assert wer(phrase.text, model.transcribe(audio, max_window_s=5)) <= 0.05


def _copy(model_dir: Path, dest: Path, skip: str = "") -> Path:
    dest.mkdir()
    for f in model_dir.iterdir():
        if f.name != skip:
            (dest / f.name).symlink_to(f)
    return dest


def test_an_explicit_folder_loads(model_dir, clips, tmp_path):
    folder = _copy(model_dir, tmp_path / "other")
    assert resolve_moonshine_path(ASRConfig(engine="moonshine", model=str(folder))) == str(folder)
    assert resolve_moonshine_path(ASRConfig(engine="moonshine")) == str(model_dir)
    assert MoonshineModel(folder).transcribe(clips[1].audio) == "Goodbye."


def test_a_tokenizer_json_reads_as_the_bin(model, model_dir, clips, tmp_path):
    """A Hugging Face export's tokenizer.json (byte tokens written <0xNN>) decodes as tokenizer.bin."""
    pieces = model.tokenizer.pieces
    vocab = {(f"<0x{p[0]:02X}>" if 3 <= i < 259 else p.decode()): i for i, p in enumerate(pieces)
             if i not in model.tokenizer.special_ids}
    added = [{"id": i, "content": pieces[i].decode(), "special": True} for i in sorted(model.tokenizer.special_ids)]
    path = tmp_path / "tokenizer.json"
    path.write_text(json.dumps({"model": {"type": "BPE", "vocab": vocab}, "added_tokens": added}))
    from_json = MoonshineTokenizer.load(path)
    tokens = model.generate(clips[-1].audio, 100).tokens
    assert from_json.decode(tokens) == model.tokenizer.decode(tokens) and "Press" in from_json.decode(tokens)
    assert from_json.decode([1, *tokens, 2, 32000]) == from_json.decode(tokens)  # specials left out
    folder = _copy(model_dir, tmp_path / "json", skip="tokenizer.bin")
    (folder / "tokenizer.json").symlink_to(path)
    assert MoonshineModel(folder).transcribe(clips[0].audio) == "Hello."


def test_a_missing_file_is_named(model_dir, tmp_path):
    with pytest.raises(FileNotFoundError, match=r"no encoder_model.ort or encoder_model.onnx in .*enc"):
        MoonshineModel(_copy(model_dir, tmp_path / "enc", skip="encoder_model.ort"))
    with pytest.raises(FileNotFoundError, match=r"no tokenizer.bin or tokenizer.json in .*tok"):
        MoonshineModel(_copy(model_dir, tmp_path / "tok", skip="tokenizer.bin"))
    with pytest.raises(FileNotFoundError, match=r"folder .*nowhere does not exist"):
        MoonshineModel(tmp_path / "nowhere")


def test_a_corrupt_file_is_named(model_dir, tmp_path):
    folder = _copy(model_dir, tmp_path / "bad", skip="decoder_model_merged.ort")
    (folder / "decoder_model_merged.ort").write_bytes(b"not a model" * 100)
    with pytest.raises(MoonshineModelError, match=r"cannot load Moonshine model file .*decoder_model_merged.ort"):
        MoonshineModel(folder)
    # the encoder where the decoder belongs: loads in ONNX Runtime, but is no decoder
    (folder / "decoder_model_merged.ort").unlink()
    (folder / "decoder_model_merged.ort").symlink_to(model_dir / "encoder_model.ort")
    with pytest.raises(MoonshineModelError, match=r"is not a merged Moonshine decoder"):
        MoonshineModel(folder)
    truncated = _copy(model_dir, tmp_path / "vocab", skip="tokenizer.bin")
    (truncated / "tokenizer.bin").write_bytes((model_dir / "tokenizer.bin").read_bytes() + b"\x05ab")
    with pytest.raises(MoonshineModelError, match=r"tokenizer.bin ends inside a token"):
        MoonshineModel(truncated)
