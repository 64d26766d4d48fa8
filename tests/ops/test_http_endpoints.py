"""Over real HTTP: a WebRTC offer refused with 503 + Retry-After, /ready, /metrics, cadence stats."""

from __future__ import annotations

import aiohttp
from aiohttp.test_utils import TestServer
from aiortc import RTCPeerConnection
from prometheus_client.parser import text_string_to_metric_families

from agent.config import Config
from agent.metrics.scrape import format_table, parse_metrics
from agent.metrics_http import METRICS_KEY
from agent.server_factory import make_server


async def _offer() -> dict:
    pc = RTCPeerConnection()
    pc.addTransceiver("audio", direction="sendrecv")
    await pc.setLocalDescription(await pc.createOffer())
    offer = {"sdp": pc.localDescription.sdp, "type": "offer"}
    await pc.close()
    return offer


async def test_full_server_refuses_offer_with_503_and_says_why():
    config = Config()
    config.admission.max_sessions = 1
    config.admission.queue_size = 0
    config.admission.retry_after_s = 9
    server = make_server(config)
    app = server.make_app()
    assert await server.gate.acquire() is None  # one caller is talking
    async with TestServer(app) as ts, aiohttp.ClientSession() as http:
        base = str(ts.make_url(""))
        async with http.get(f"{base}/ready") as r:
            body = await r.json()
            assert r.status == 503 and body["ready"] is False and "at capacity: 1/1" in body["reason"]
        async with http.post(f"{base}/api/offer", json=await _offer()) as r:
            body = await r.json()
            assert r.status == 503 and r.headers["Retry-After"] == "9"
            assert "at capacity" in body["error"] and "queue full" in body["error"]
        async with http.get(f"{base}/metrics") as r:
            text = await r.text()
            assert r.status == 200 and r.headers["Content-Type"].startswith("text/plain")
        server.gate.release()
        async with http.get(f"{base}/ready") as r:
            assert r.status == 200 and (await r.json())["ready"] is True
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for fam in text_string_to_metric_families(text) for s in fam.samples}
    assert samples[("cadence_refusals_total", (("reason", "queue_full"),))] == 1
    assert samples[("cadence_sessions_active", ())] == 1
    assert samples[("cadence_ready", ())] == 0
    assert samples[("cadence_budget", (("stage", "asr_final"),))] == config.budgets.asr_final_p99_ms


async def test_metrics_round_trip_into_the_stats_table():
    config = Config()
    server = make_server(config)
    app = server.make_app()
    stages = app[METRICS_KEY].stages
    for v in range(1, 101):
        stages.record("asr_final", float(v))
        stages.record("output_rt_ratio", v / 10.0)
    stages.record("first_audio", 5000.0)
    async with TestServer(app) as ts, aiohttp.ClientSession() as http, \
            http.get(str(ts.make_url("/metrics"))) as r:
        scrape = parse_metrics(await r.text())
    asr = scrape.rows["asr_final"]
    assert asr.count == 100 and asr.max == 100.0
    assert abs(asr.quantiles[0.99] - 99.01) < 1.0 and abs(asr.quantiles[0.5] - 50.5) < 0.6
    ratio = scrape.rows["output_rt_ratio"]
    assert ratio.min == 0.1 and abs(ratio.quantiles[0.01] - 0.199) < 0.01
    assert ratio.in_breach  # p1 0.2x < 1.2x over 100 replies
    fa = scrape.rows["first_audio"]
    assert fa.in_breach is False and fa.breach_samples == 1  # one sample beyond 1500 ms; too few to judge
    lines = {line.split()[0]: line for line in format_table(scrape).splitlines() if line.strip()}
    assert lines["asr_final"].split()[1:6] == ["100", "50.3", "95.1", "98.9", "100.0"]
    assert "BREACH" not in lines["asr_final"]
    assert lines["output_rt_ratio"].endswith("BREACH") and "0.10x" in lines["output_rt_ratio"]


async def test_cadence_stats_prints_the_live_table(capsys):
    import asyncio

    from agent.cli import main

    server = make_server(Config())
    app = server.make_app()
    for v in (100.0, 200.0, 300.0):
        app[METRICS_KEY].stages.record("llm_first_token", v)
    async with TestServer(app) as ts:
        code = await asyncio.to_thread(main, ["stats", "--url", str(ts.make_url("")), "--log-level", "ERROR"])
    out = capsys.readouterr().out
    assert code == 0
    row = next(line for line in out.splitlines() if line.startswith("llm_first_token"))
    cells = row.split()
    assert cells[1] == "3" and abs(float(cells[2]) - 200.0) < 2.0 and cells[5] == "300.0"
    assert "sessions 0/4, waiting 0, ready yes" in out


def test_cadence_stats_names_an_unreachable_server(capsys):
    from agent.cli import main
    from agent.llm_server import free_port

    url = f"http://127.0.0.1:{free_port()}"
    assert main(["stats", "--url", url, "--log-level", "ERROR"]) == 2
    assert f"cannot read {url}/metrics" in capsys.readouterr().err
