"""One real ``cadence serve`` (embedded models) for the phone end-to-end tests of this package."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from testkit.servers import cadence_serve


@pytest.fixture(scope="package")
def phone_server(tmp_path_factory) -> Iterator[dict]:
    """Started once for ``cadence capacity --transport phone`` and the phone calls: two callers at most, and no
    budget gate (a capacity run measures the box; on a slow one the gate would refuse its callers); each call's turns
    logged at its hang-up (``server.log_call_turns``, which bench/turn_tail.py reads). Yields
    ``url``, ``ws`` (the phone WebSocket), ``log`` and ``proc``."""
    with cadence_serve("admission.max_sessions=2", "admission.budget_gate=false", "server.log_call_turns=true",
                       log_path=tmp_path_factory.mktemp("logs") / "serve.log") as srv:
        srv["ws"] = srv["url"].replace("http://", "ws://") + "/phone/ws"
        yield srv
