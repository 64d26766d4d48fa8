"""Shared tiny checkpoints for the Parakeet tests (built once per session, offline)."""

from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("sentencepiece")


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from asr.parakeet.tiny import make_tiny_checkpoint

    return make_tiny_checkpoint(tmp_path_factory.mktemp("tiny") / "ckpt", vocab_size=256, layers=2, seed=0)


@pytest.fixture(scope="session")
def tiny_nemo(tiny_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    from asr.parakeet.tiny import make_tiny_nemo

    return make_tiny_nemo(tmp_path_factory.mktemp("nemo") / "tiny.nemo", hf_dir=tiny_dir)


@pytest.fixture(scope="session")
def tiny_ckpt(tiny_dir: Path):
    from asr.parakeet.loading import load_parakeet

    return load_parakeet(tiny_dir)
