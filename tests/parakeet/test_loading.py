"""Checkpoint loading: transformers folders, .nemo archives, conversion, and the errors users see."""

from __future__ import annotations

import io
import json
import shutil
import tarfile
from pathlib import Path

import pytest
import torch

from asr.parakeet.loading import CheckpointError, convert_nemo, load_parakeet


def _same_weights(a, b) -> None:
    sa, sb = a.model.state_dict(), b.model.state_dict()
    assert set(sa) == set(sb)
    for key in sa:
        assert torch.equal(sa[key], sb[key]), key


def test_nemo_archive_maps_onto_the_same_modules(tiny_dir, tiny_nemo):
    folder, nemo = load_parakeet(tiny_dir), load_parakeet(tiny_nemo)
    _same_weights(folder, nemo)
    assert nemo.model.config.blank_token_id == folder.model.config.blank_token_id == 256
    assert list(nemo.model.config.durations) == [0, 1, 2, 3, 4]
    assert nemo.features == folder.features
    ids = folder.tokenizer.encode("hello weather tomorrow")
    assert nemo.tokenizer.decode(ids) == folder.tokenizer.decode(ids) == "hello weather tomorrow"
    assert nemo.frame_seconds == pytest.approx(0.08)


def test_nemo_keys_are_nemo_names(tiny_nemo):
    from asr.parakeet.nemo_format import read_nemo

    keys = set(read_nemo(tiny_nemo).state_dict)
    for expected in ("encoder.pre_encode.conv.0.weight", "encoder.pre_encode.out.weight",
                     "encoder.layers.0.self_attn.linear_pos.weight", "encoder.layers.1.conv.batch_norm.running_var",
                     "encoder.layers.0.self_attn.pos_bias_u", "decoder.prediction.embed.weight",
                     "decoder.prediction.dec_rnn.lstm.weight_hh_l1", "joint.enc.weight", "joint.pred.bias",
                     "joint.joint_net.2.weight", "preprocessor.featurizer.fb"):
        assert expected in keys


def test_convert_nemo_writes_a_loadable_transformers_folder(tiny_nemo, tmp_path):
    from transformers import ParakeetForTDT

    out = convert_nemo(tiny_nemo, tmp_path / "converted")
    _same_weights(load_parakeet(out), load_parakeet(tiny_nemo))
    model = ParakeetForTDT.from_pretrained(out)  # transformers itself reads it
    assert model.generation_config.decoder_start_token_id == 256
    assert (out / "tokenizer.model").is_file() and (out / "preprocessor_config.json").is_file()


def test_bfloat16_load(tiny_dir):
    ckpt = load_parakeet(tiny_dir, dtype="bfloat16")
    assert next(ckpt.model.parameters()).dtype == torch.bfloat16


def test_missing_paths_are_file_not_found(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(FileNotFoundError, match="no such checkpoint"):
        load_parakeet(tmp_path / "nothing-here")
    with pytest.raises(FileNotFoundError, match="config.json"):
        load_parakeet(tmp_path)
    with pytest.raises(FileNotFoundError, match="Hub download failed"):
        load_parakeet("nvidia/certainly-not-cached-here")


def test_wrong_architecture_folder(tiny_dir, tmp_path):
    folder = shutil.copytree(tiny_dir, tmp_path / "ctc")
    config = json.loads((folder / "config.json").read_text())
    config["model_type"] = "parakeet_ctc"
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(CheckpointError, match="wrong architecture 'parakeet_ctc'"):
        load_parakeet(folder)


def test_truncated_archive(tiny_nemo, tmp_path):
    data = tiny_nemo.read_bytes()
    cut = tmp_path / "cut.nemo"
    cut.write_bytes(data[: len(data) * 2 // 3])
    with pytest.raises(CheckpointError, match="truncated"):
        load_parakeet(cut)
    junk = tmp_path / "junk.nemo"
    junk.write_bytes(b"definitely not a tar file" * 100)
    with pytest.raises(CheckpointError):
        load_parakeet(junk)


def _rewrite_nemo(src: Path, dst: Path, edit) -> Path:
    import yaml

    with tarfile.open(src) as tar_in, tarfile.open(dst, "w") as tar_out:
        for info in tar_in:
            data = tar_in.extractfile(info).read()
            if info.name.endswith("model_config.yaml"):
                cfg = yaml.safe_load(data)
                edit(cfg)
                data = yaml.safe_dump(cfg).encode()
                info.size = len(data)
            tar_out.addfile(info, io.BytesIO(data))
    return dst


def test_nemo_of_another_architecture(tiny_nemo, tmp_path):
    def to_ctc(cfg):
        cfg["target"] = "nemo.collections.asr.models.ctc_bpe_models.EncDecCTCModelBPE"
        cfg.pop("decoding")
        cfg.pop("model_defaults")
        cfg.pop("loss")

    with pytest.raises(CheckpointError, match="not a TDT model"):
        load_parakeet(_rewrite_nemo(tiny_nemo, tmp_path / "ctc.nemo", to_ctc))

    def bigger(cfg):
        cfg["encoder"]["n_layers"] = 3

    with pytest.raises(CheckpointError, match="weights do not fit"):
        load_parakeet(_rewrite_nemo(tiny_nemo, tmp_path / "layers.nemo", bigger))
