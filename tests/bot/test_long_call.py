"""A 30-minute call never overflows the embedded model's 2,048-token window.

Simulated fast (``testkit.long_call``): every turn goes through pipecat's aggregators and
``CadenceLLMService`` to the real llama.cpp server (SmolLM2, ``--n_ctx 2048``), replies capped
at 8 tokens to keep CI quick. Without trimming the history passes the window within minutes
(the test checks that it would have); with it no request fails, none gets the apology, the
system prompt is always sent, and the newest tool result outlives its turn.
"""

from __future__ import annotations

import asyncio

import pytest

from agent.llm_server import embedded_llama_server
from testkit.long_call import run_long_call

pytestmark = pytest.mark.slow


# ~120 requests: about a minute on two quiet cores; far longer when other work shares them.
@pytest.mark.timeout(2400)
def test_thirty_minute_call_stays_inside_the_window():
    with embedded_llama_server(threads=2, context_size=2048, api_key="k-long") as server:
        report = asyncio.run(run_long_call(server.base_url, server.model_id, minutes=30, max_tokens=8,
                                           context_size=2048, api_key="k-long"))
    print(f"turns={report.turns} simulated={report.simulated_s / 60:.1f} min wall={report.wall_s:.1f} s "
          f"trims={report.trims} max_sent~{report.max_estimate_tokens} untrimmed~{report.untrimmed_estimate_tokens} "
          f"slowest turn={max(report.turn_s):.2f} s empty={report.empty_replies}")
    assert report.simulated_s >= 30 * 60
    assert not report.errors, report.errors[:3]
    assert report.apologies == 0
    assert report.untrimmed_estimate_tokens > 3 * 2048, "the call is not long enough to need trimming"
    assert report.trims >= 3
    assert report.max_estimate_tokens <= 2048 - 8
    messages = report.final_messages
    results = [m for m in messages if m.get("role") == "tool"]
    assert results, "the newest tool results were trimmed away"
    calls = {c["id"] for m in messages for c in m.get("tool_calls") or []}
    assert all(r["tool_call_id"] in calls for r in results), "a tool result outlived its call"
