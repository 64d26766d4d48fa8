"""The embedded Moonshine tiny-en (moonshine-voice 0.1.0, ``cadence[moonshine]``), loaded once per session."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.models import moonshine_model_dir
from asr.moonshine.model import MoonshineModel, shared_moonshine_model


@pytest.fixture(scope="session")
def model_dir() -> Path:
    return moonshine_model_dir()


@pytest.fixture(scope="session")
def model(model_dir: Path) -> MoonshineModel:
    return shared_moonshine_model(str(model_dir), 2)
