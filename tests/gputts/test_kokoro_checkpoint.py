"""Kokoro checkpoints: a saved folder reloads to the same audio; broken files fail in one clear line."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from tts.kokoro import config as kconfig
from tts.kokoro.checkpoint import (
    MODEL_FILE,
    CheckpointError,
    build_random,
    load_checkpoint,
    load_voice,
    random_voice,
    save_folder,
)
from tts.kokoro.engine import KokoroEngine
from tts.kokoro.model import Utterance
from tts.kokoro.options import KokoroOptions

IDS = [50, 83, 54, 156, 31, 16, 65, 156, 87, 123, 54, 46, 4]


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    model = build_random(kconfig.tiny_config(), seed=7)
    voice = random_voice(model.config, seed=7)
    folder = save_folder(model, tmp_path_factory.mktemp("kokoro") / "Kokoro-tiny", {"af_test": voice})
    return model, voice, folder


def _audio(model, voice) -> np.ndarray:
    return model.synthesize([Utterance(IDS, voice.reshape(-1, 2 * model.style_dim)[len(IDS) - 1], 1.0, seed=5)]).audio[0]


def test_folder_round_trip_gives_the_same_audio(saved):
    model, voice, folder = saved
    on_disk = torch.load(folder / MODEL_FILE, weights_only=True)
    assert set(on_disk) == {"bert", "bert_encoder", "predictor", "text_encoder", "decoder"}
    assert "module.generator.conv_post.weight_g" in on_disk["decoder"]  # weight norm as Kokoro stores it
    assert torch.load(folder / "voices" / "af_test.pt", weights_only=True).shape == (510, 1, 16)
    loaded = load_checkpoint(folder)
    np.testing.assert_allclose(_audio(loaded, load_voice(folder / "voices" / "af_test.pt", loaded.config)),
                               _audio(model, voice), atol=2e-6)
    # the engine takes the folder and a voice name, and a bare .pth beside config.json
    engine = KokoroEngine(KokoroOptions(checkpoint=str(folder), voice="af_test", device="cpu", warmup=False,
                                        g2p="chars"))
    try:
        assert torch.equal(engine.voice_pack, voice.reshape(-1, 16))
        assert sum(len(p) for p in engine.synthesize("hello there.")) > 0
    finally:
        engine.close()
    assert load_checkpoint(folder / MODEL_FILE).config["hidden_dim"] == model.config["hidden_dim"]


def test_truncated_checkpoint_is_one_clear_line(saved, tmp_path):
    _, _, folder = saved
    data = (folder / MODEL_FILE).read_bytes()
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "config.json").write_text((folder / "config.json").read_text())
    (broken / MODEL_FILE).write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError) as err:
        load_checkpoint(broken)
    msg = str(err.value)
    assert "\n" not in msg and "corrupt or not a torch file" in msg and MODEL_FILE in msg


def test_wrong_files_are_named(saved, tmp_path):
    _, _, folder = saved
    text = tmp_path / "notes.pth"
    text.write_text("not weights")
    with pytest.raises(CheckpointError, match="corrupt or not a torch file"):
        load_checkpoint(text)
    other = tmp_path / "other.pth"
    torch.save({"state_dict": {"w": torch.zeros(2)}}, other)
    with pytest.raises(CheckpointError, match="not a Kokoro checkpoint: no bert"):
        load_checkpoint(other)
    # tiny weights under the full Kokoro-82M config: a shape error naming the tensor
    with pytest.raises(CheckpointError, match=r"bert\..* has shape .* the config expects"):
        load_checkpoint(folder / MODEL_FILE, config=kconfig.full_config())
    bad_cfg = tmp_path / "cfg"
    bad_cfg.mkdir()
    (bad_cfg / MODEL_FILE).write_bytes((folder / MODEL_FILE).read_bytes())
    (bad_cfg / "config.json").write_text(json.dumps({"hidden_dim": 16}))
    with pytest.raises(CheckpointError, match="not a Kokoro config: missing"):
        load_checkpoint(bad_cfg)
    with pytest.raises(CheckpointError, match="not found"):
        load_checkpoint(tmp_path / "absent.pth")
    voice = tmp_path / "voice.pt"
    torch.save(torch.zeros(510, 1, 7), voice)
    with pytest.raises(CheckpointError, match="not a Kokoro voice pack"):
        load_voice(voice, kconfig.tiny_config())
