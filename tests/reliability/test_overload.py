"""The overload judgement counts only sessions really running (finding 7).

Before: any held slot (a session connecting, or stuck) made the gate judge the stage budgets, so a
breach caused by one caller (audio at 20x real time) refused every new caller for the whole
budget window (~47 s measured). The fast sender itself is held to real time by the phone input
(``test_phone_frames.test_a_fast_sender_is_held_to_real_time``).
"""

from __future__ import annotations

from agent.config import Config
from agent.metrics_http import METRICS_KEY
from agent.server_factory import make_server


async def test_a_breach_does_not_close_the_gate_while_no_session_is_running():
    server = make_server(Config())
    app = server.make_app()
    stages = app[METRICS_KEY].stages
    for _ in range(50):
        stages.record("asr_final", 5000.0)  # far beyond the 600 ms budget
    assert app[METRICS_KEY].budgets.evaluate(), "the budget is in breach"
    assert await server.gate.acquire() is None  # a slot held by a session with no audio flowing
    ok, reason = server.gate.ready()
    assert ok, reason
    assert await server.gate.acquire() is None, "a caller was refused for a breach nobody is suffering"

    from agent.session import SessionWatch

    server.live["talking"] = SessionWatch()  # a caller whose audio is flowing now
    ok, reason = server.gate.ready()
    assert not ok and "overloaded" in reason
    refusal = await server.gate.acquire()
    assert refusal is not None and refusal.kind == "overloaded"
