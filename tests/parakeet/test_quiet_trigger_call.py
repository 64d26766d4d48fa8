"""``llm.speculate = "final+quiet"`` in the agent's own pipeline (``build_worker``) with streaming Parakeet: recorded
calls through the file transport, as ``cadence talk`` plays them, with the tiny random checkpoint, the embedded
llama.cpp server and the default TTS.

The VAD stage marks each pause, Parakeet decodes the utterance so far at it, the reply is speculated on that text
and its audio held until the turn end. Asserted: pauses start speculations, each of them is confirmed or withdrawn,
every utterance is answered once and none of a reply is heard before its turn end, and a confirmed reply answered
the very text the turn's final reads (with only quiet after the pause the final is that decode:
``asr.final_from_pause``)."""

from __future__ import annotations

import asyncio

import pytest

from agent.capacity.corpus import ASTERISK_DIR
from agent.config import Config
from agent.llm_server import ManagedLLMServer, embedded_llama_server
from agent.pipeline import Engines, build_worker
from agent.turn_observer import TurnObserver, TurnTiming
from testkit.talk_clips import talk_clips
from transports.file_transport import CallScript, FileTransport, run_until_script_done
from transports.params import transport_params

pytest.importorskip("llama_cpp")
pytestmark = [pytest.mark.slow, pytest.mark.skipif(not (ASTERISK_DIR / "ss-noservice.wav").is_file(),
                                                   reason="needs asterisk-core-sounds-en-wav (scripts/install.sh)")]

CLIPS = ["conf-onlyperson", "auth-thankyou", "tt-weasels"]  # one sentence each, no pause inside


@pytest.fixture(scope="module")
def server():
    with embedded_llama_server(threads=2) as srv:
        yield srv


def _config(tiny_dir) -> Config:
    config = Config()
    config.asr.engine, config.asr.model = "parakeet", str(tiny_dir)
    config.asr.device, config.asr.dtype, config.asr.encoder_backend = "cpu", "float32", "eager"
    config.llm.speculate, config.llm.max_tokens = "final+quiet", 16
    return config


async def _call(engines: Engines, audio: list) -> list[TurnTiming]:
    cfg = engines.config
    script = CallScript(audio, max_wait_s=15.0)
    transport = FileTransport(transport_params(cfg.audio.in_sample_rate, cfg.audio.out_sample_rate), script)
    loop = asyncio.get_running_loop()
    observer = TurnObserver(on_turn=lambda _t: loop.call_later(0.3, script.turn_done.set))
    await run_until_script_done(build_worker(engines, transport, observers=[observer]), script)
    return observer.turns


def test_pauses_start_the_reply_and_each_utterance_is_answered_once(server: ManagedLLMServer, tiny_dir):
    config = _config(tiny_dir)
    engines = Engines.load(config, server.base_url, server.model_id)
    clips = talk_clips(config.audio.in_sample_rate, single=CLIPS, joined=[])
    turns = asyncio.run(_call(engines, [c.audio for c in clips]))
    stats = engines.speculation_stats.snapshot()
    for t in turns:
        print(f"turn {t.index}: [{t.transcript_text}] requests {t.llm_requests}, first audio "
              f"{t.stages_ms().get('eos_to_first_audio', float('nan')):.0f} ms after the end of speech")
    print(f"speculation {stats}")

    assert stats["started"].get("quiet", 0) >= 1 and stats["confirmed"] >= 1, stats
    assert sum(stats["started"].values()) == stats["confirmed"] + stats["wasted"], stats
    answered = [t for t in turns if t.llm_requests]
    assert len(answered) == len(clips) and all(t.llm_requests == 1 for t in answered), turns
    for t in answered:  # none of a reply before its turn end
        assert t.turn_end is not None and t.first_audio_out is not None and t.first_audio_out >= t.turn_end, t
        assert all(v >= 0 for v in t.stages_ms().values()), t.stages_ms()
