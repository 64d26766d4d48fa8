"""Fixtures shared by the test files at the top of ``tests/``."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from testkit.servers import cadence_serve


@pytest.fixture(scope="session")
def webrtc_server(tmp_path_factory) -> Iterator[dict]:
    """A real ``cadence serve`` (embedded models) offering only 127.0.0.1 as ICE host candidate, started once
    for the WebRTC client tests and the browser-page tests (idle in between: ~1% of a core)."""
    with cadence_serve("server.webrtc_ice_hosts=127.0.0.1",
                       log_path=tmp_path_factory.mktemp("logs") / "serve.log") as srv:
        yield srv
