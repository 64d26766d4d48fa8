"""The admission gate under 3x offered load, with real callers through the real pipeline.

Cap 1, no queue: of three callers that connect at once, one is admitted and two are refused
at connect (before any pipeline exists), and the admitted caller is served like a caller
alone: every turn answered, first audio and delivery in line with a solo baseline.
"""

from __future__ import annotations

import asyncio
import time

from agent.capacity.analysis import turn_deliveries
from agent.capacity.caller import call
from tests.ops.helpers import gate_admit, make_server, params


async def _one_turn(server, caller: int, utterances, admit=None, leave=None):
    return await call(server.run_caller, params(server), caller, utterances, stop_at=time.monotonic() + 1.0,
                      max_wait_s=20.0, admit=admit, leave=leave)


async def test_gate_refuses_excess_at_connect_and_keeps_the_admitted_caller_whole(embedded, corpus):
    server, bundle = make_server(embedded, admission={"max_sessions": 1, "queue_size": 0})
    utterance = [corpus[0]]

    solo = await _one_turn(server, 0, utterance)
    solo_turn = turn_deliveries(solo)[0]
    assert solo_turn.answered, "the solo baseline got no reply"

    started = len(server.sessions)
    t0 = time.monotonic()
    records = await asyncio.gather(*(
        _one_turn(server, i, utterance, admit=gate_admit(server), leave=server.gate.release) for i in (1, 2, 3)
    ))
    admitted = [r for r in records if r.refused is None]
    refused = [r for r in records if r.refused is not None]

    assert len(admitted) == 1 and len(refused) == 2
    for r in refused:
        assert r.refused.startswith("503 queue_full") and not r.chunks and r.connected_at == 0.0
        assert r.ended_at - t0 < 0.2  # refused at once, not after a wait
    # Refused at connect: no pipeline was ever built for them.
    assert len(server.sessions) - started == 1
    assert server.gate.active == 0 and server.gate.stats.refused["queue_full"] == 2

    turn = turn_deliveries(admitted[0])[0]
    assert turn.answered, "the admitted caller got no reply"
    assert turn.first_audio_ms < 2.0 * solo_turn.first_audio_ms + 1500.0, (turn, solo_turn)
    if solo_turn.ratio is not None and turn.ratio is not None:
        assert turn.ratio >= 0.5 * min(solo_turn.ratio, 2.0), (turn.ratio, solo_turn.ratio)
