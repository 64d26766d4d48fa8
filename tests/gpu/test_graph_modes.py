"""Mode selection and fallback order for the GPU loops (CPU only)."""

from __future__ import annotations

import pytest

from asr.parakeet.decoding.cuda_api import check, parse_version
from asr.parakeet.decoding.graph_modes import Capabilities, GraphMode, best_mode, fallbacks, select_mode

FULL = Capabilities(cuda=True, driver_version=13000, bindings_version=(13, 3, 1))


def test_best_mode() -> None:
    assert best_mode(Capabilities(cuda=False)) is GraphMode.EAGER
    assert best_mode(FULL) is GraphMode.CONDITIONAL
    assert best_mode(Capabilities(cuda=True)) is GraphMode.HOST_CHECKS  # no cuda-bindings
    old_driver = Capabilities(cuda=True, driver_version=12020, bindings_version=(13, 0))
    assert best_mode(old_driver) is GraphMode.HOST_CHECKS
    old_bindings = Capabilities(cuda=True, driver_version=13000, bindings_version=(12, 3))
    assert best_mode(old_bindings) is GraphMode.HOST_CHECKS


def test_select_mode_degrades_but_never_upgrades() -> None:
    assert select_mode("auto", FULL) is GraphMode.CONDITIONAL
    assert select_mode("graphs", FULL) is GraphMode.HOST_CHECKS
    assert select_mode("eager", FULL) is GraphMode.EAGER
    assert select_mode("conditional", Capabilities(cuda=True)) is GraphMode.HOST_CHECKS
    assert select_mode(GraphMode.CONDITIONAL, Capabilities(cuda=False)) is GraphMode.EAGER
    with pytest.raises(ValueError):
        select_mode("fast", FULL)


def test_fallback_order() -> None:
    assert fallbacks(GraphMode.CONDITIONAL) == [GraphMode.CONDITIONAL, GraphMode.HOST_CHECKS, GraphMode.EAGER]
    assert fallbacks(GraphMode.EAGER) == [GraphMode.EAGER]


def test_version_and_status_helpers() -> None:
    assert parse_version("13.3.1") == (13, 3, 1)
    assert parse_version("13.0.0rc1") == (13, 0, 0)
    assert parse_version("dev") == ()
    assert check((0, 5)) == 5
    assert check((0,)) is None
    assert check((0, 1, 2)) == (1, 2)
    with pytest.raises(RuntimeError):
        check((2, None))
