"""smart-turn in the engine process (vad.turn_model = "engine"): pipecat's turn analyzer with its prediction
answered by the engine's batched torch model, the same audio segment as stock, concurrent callers in shared
batches, and the process's ONNX session taking over when the engine cannot answer."""

from __future__ import annotations

import asyncio
import re
import tempfile
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from pipecat.audio.turn.base_turn_analyzer import EndOfTurnState
from pipecat.audio.turn.smart_turn.base_smart_turn import BaseSmartTurn, SmartTurnParams

from agent.config import Config, ConfigError
from agent.engine_process import engine_spec, turn_host, turn_socket
from agent.smart_turn.features import last_window
from agent.smart_turn.remote import RemoteSmartTurnAnalyzer
from agent.turn_ends import TURN_ENDS
from testkit.engine_server import start_engine_server, stop_engine_server
from testkit.servers import cadence_serve
from tests.turn.test_smart_turn_torch import speech16k
from transports.engine_link import Connection


@pytest.fixture(scope="module")
def engine() -> Iterator[str]:
    with tempfile.TemporaryDirectory(prefix="cad-turn-") as d:
        path = str(Path(d) / "engine.sock")
        proc = start_engine_server(path, {"turn": {"device": "cpu", "max_batch": 8}})
        yield path
        stop_engine_server(proc)
        assert proc.returncode == 0


class _Recording(BaseSmartTurn):
    """Stock pipecat's segment cutting; records what it would score."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.scored: list[np.ndarray] = []

    def _predict_endpoint(self, audio_array):
        self.scored.append(audio_array.copy())
        return {"prediction": 1, "probability": 1.0}


def feed(analyzers, audio16k: np.ndarray, lead_s: float = 1.0, tail_s: float = 0.2) -> None:
    """20 ms frames of quiet, the speech, quiet; speech flagged by level, as VAD would."""
    pcm = np.concatenate([np.zeros(int(lead_s * 16000), np.float32), audio16k, np.zeros(int(tail_s * 16000), np.float32)])
    pcm16 = (np.clip(pcm, -1, 1) * 32767).astype("<i2")
    for lo in range(0, len(pcm16) - 319, 320):
        frame = pcm16[lo: lo + 320]
        speech = bool(np.abs(frame).max() > 600)
        for a in analyzers:
            a.append_audio(frame.tobytes(), speech)


def analyzer(socket: str, sample_rate: int = 16000, timeout_s: float = 30.0, **kwargs) -> RemoteSmartTurnAnalyzer:
    """The engine's analyzer; its answer deadline is wide here (a loaded 2-core CI box scores a batch of 8 s windows
    on the CPU in over a second), so a fallback in these tests means the engine failed, not that the box was slow."""
    a = RemoteSmartTurnAnalyzer(socket, params=SmartTurnParams(stop_secs=0.8), timeout_s=timeout_s, **kwargs)
    a.set_sample_rate(sample_rate)
    return a


async def test_the_engine_scores_the_stock_segment_as_the_local_model_would(engine):
    from agent.smart_turn.batcher import TurnBatcher

    conn = await Connection.open(engine, 2.0)
    assert (await conn.call("hello"))["turn"] == {"device": "cpu", "max_batch": 8}
    await conn.aclose()
    remote, stock = analyzer(engine), _Recording(params=SmartTurnParams(stop_secs=0.8))
    stock.set_sample_rate(16000)
    feed([remote, stock], speech16k("vm-incorrect"))
    await stock.analyze_end_of_turn()
    assert np.array_equal(remote.segment(), stock.scored[0])  # the same pre-speech margin and cut
    expected = float(TurnBatcher(device="cpu", max_batch=1).score(last_window(stock.scored[0])[None])[0])
    state, metrics = await remote.analyze_end_of_turn()
    assert metrics.probability == pytest.approx(expected, abs=1e-4)
    assert state == (EndOfTurnState.COMPLETE if expected > 0.5 else EndOfTurnState.INCOMPLETE)
    assert metrics.processor == "RemoteSmartTurnAnalyzer" and remote.fallbacks == 0


async def test_phone_audio_is_resampled_and_concurrent_callers_share_batches(engine):
    import soxr

    names = ["agent-pass", "conf-getpin", "pbx-invalid", "queue-thankyou", "vm-goodbye", "privacy-unident"]
    callers = []
    for name in names:
        a = analyzer(engine, sample_rate=8000)
        audio8k = soxr.resample(speech16k(name), 16000, 8000).astype(np.float32)
        pcm = np.concatenate([np.zeros(8000, np.float32), audio8k, np.zeros(1600, np.float32)])
        pcm16 = (np.clip(pcm, -1, 1) * 32767).astype("<i2")
        for lo in range(0, len(pcm16) - 159, 160):
            a.append_audio(pcm16[lo: lo + 160].tobytes(), bool(np.abs(pcm16[lo: lo + 160]).max() > 600))
        callers.append(a)
    conn = await Connection.open(engine, 2.0)
    before = (await conn.call("stats"))["turn"]
    model_ends = TURN_ENDS["model"]
    results = await asyncio.gather(*(a.analyze_end_of_turn() for a in callers))
    assert TURN_ENDS["model"] - model_ends == sum(state == EndOfTurnState.COMPLETE for state, _ in results)
    after = (await conn.call("stats"))["turn"]
    await conn.aclose()
    assert all(0.0 <= m.probability <= 1.0 for _, m in results)
    assert sum(a.fallbacks for a in callers) == 0
    assert after["requests"] - before["requests"] == len(names)
    assert after["batches"] - before["batches"] < len(names)  # at least two callers scored in one call


@pytest.mark.parametrize("why", ["no engine at the socket", "slower than the deadline"])
async def test_an_engine_that_cannot_answer_leaves_the_turn_to_this_process(why, engine, tmp_path):
    from agent.shared_models import SharedSmartTurnAnalyzerV3

    if why == "no engine at the socket":
        a = analyzer(str(tmp_path / "nobody.sock"))
    else:
        a = analyzer(engine, timeout_s=1e-4)  # no reply crosses the socket in 0.1 ms
    feed([a], speech16k("queue-thankyou"))
    expected = SharedSmartTurnAnalyzerV3()._predict_endpoint(a.segment())["probability"]
    _, metrics = await a.analyze_end_of_turn()
    assert a.fallbacks == 1
    assert metrics.probability == pytest.approx(expected, abs=1e-5)
    await a.cleanup()


async def test_an_engine_without_the_model_answers_with_an_error_and_the_turn_is_still_scored(tmp_path):
    path = str(tmp_path / "e.sock")
    proc = await asyncio.to_thread(start_engine_server, path, {})  # its ready probe runs a loop of its own
    try:
        a = analyzer(path)
        feed([a], speech16k("agent-pass"))
        _, metrics = await a.analyze_end_of_turn()
        assert a.fallbacks == 1 and 0.0 <= metrics.probability <= 1.0
        await a.cleanup()
    finally:
        await asyncio.to_thread(stop_engine_server, proc)


def test_config_names_where_the_model_runs():
    from agent.pipeline import make_turn_analyzer

    config = Config()
    assert type(make_turn_analyzer(config)).__name__ == "SharedSmartTurnAnalyzerV3"
    config.vad.turn_model = "engine"
    with pytest.raises(ConfigError, match="engine process"):
        make_turn_analyzer(config)
    config.server.engine_socket = "/tmp/a.sock,/tmp/b.sock"
    assert turn_socket(config) == "/tmp/a.sock"
    config.server.asr_engine_socket = "/tmp/asr.sock"
    assert turn_socket(config) == "/tmp/asr.sock"
    config.vad.turn_model = "gpu"
    with pytest.raises(ConfigError, match="onnx, engine"):
        make_turn_analyzer(config)


def test_the_engine_process_that_hosts_the_model():
    config = Config()
    config.vad.turn_model = "engine"
    config.vad.turn_device = "cuda:1"
    assert turn_host(config, ("tts", "asr")) and not turn_host(config, ("tts",), index=1)
    config.asr.engine, config.server.asr_engine_process = "parakeet", True
    assert turn_host(config, ("asr",)) and not turn_host(config, ("tts",))
    assert engine_spec(config, ("asr", "turn"))["turn"] == {"device": "cuda:1", "weights": ""}
    assert "turn" not in engine_spec(config, ("asr",))
    config.vad.turn_model = "onnx"
    assert not turn_host(config, ("asr",)) and "turn" not in engine_spec(config, ("asr", "turn"))


def test_a_call_through_cadence_serve_has_its_turns_scored_by_the_engine_process():
    """``cadence serve`` with an engine process and ``vad.turn_model = "engine"`` (on the CPU here): a phone
    caller's question is answered, the engine process hosts smart-turn and scored the turn, and no session
    fell back to its own ONNX session."""
    from testkit.phone_prompts import pcm8k
    from transports.phone.loopback_caller import LoopbackCaller

    async def ask(url: str) -> tuple[float, float] | None:
        caller = await LoopbackCaller(url.replace("http://", "ws://") + "/phone/ws").connect()
        try:
            await asyncio.sleep(0.5)
            asked = await caller.say(pcm8k("conf-getpin"))
            reply = await caller.wait_reply(asked.last, timeout_s=30)
            await asyncio.sleep(2.5)  # one more engine load report
            return reply
        finally:
            await caller.hang_up()

    with cadence_serve("server.engine_process=true", "server.engine_report_s=1", "tts.engine=piper",
                       "vad.turn_model=engine", "vad.turn_device=cpu") as srv:
        reply = asyncio.run(ask(srv["url"]))
    log = "".join(srv["log"])
    assert "turn=smart-turn-v3 on cpu" in log, log[-3000:]
    assert reply is not None, log[-3000:]
    served = [int(m) for m in re.findall(r"turn requests (\d+)", log)]
    assert sum(served) >= 1, log[-3000:]
    assert "scoring on this CPU" not in log


async def test_a_malformed_request_gets_its_error_and_the_connection_goes_on(engine):
    conn = await Connection.open(engine, 2.0)
    try:
        replies = []
        for payload in (b"abc", b"", np.array([np.nan] * 1600, "<f4").tobytes(),
                        np.zeros(16000, "<f4").tobytes()):
            rid = conn.next_id()
            with conn.inbox(rid) as inbox:
                conn.send({"op": "turn", "id": rid}, payload)
                replies.append((await asyncio.wait_for(inbox.get(), 10.0))[0])
    finally:
        await conn.aclose()
    assert [r["op"] for r in replies] == ["error", "error", "error", "reply"]
    assert "3 bytes" in replies[0]["message"] and "0 bytes" in replies[1]["message"]
    assert "not finite" in replies[2]["message"] and 0.0 <= replies[3]["probability"] <= 1.0
