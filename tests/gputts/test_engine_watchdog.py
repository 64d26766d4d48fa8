"""The engine's watchdog: a batcher tick that never finishes (a hung GPU) stops the process for its supervisor."""

from __future__ import annotations

import asyncio
import logging

from agent.engine_watchdog import STALL_EXIT_CODE, hosted_batchers, stalled, watch_ticks
from testkit.engine_server import engine_command
from tests.gputts.conftest import HeldModel


async def test_a_stalled_tick_logs_every_stack_and_exits_for_a_restart(engine, caplog):
    from tts.kokoro.batcher import SynthesisBatcher

    model = HeldModel(engine.model)
    batcher = SynthesisBatcher(model, max_batch=4)  # type: ignore[arg-type]
    try:
        assert batcher.stalled_s() == 0.0
        request = batcher.enqueue(engine.utterance(engine.phoneme_ids("Hello there.")))
        await asyncio.sleep(0.3)
        assert batcher.stalled_s() >= 0.25  # the tick started and has not finished
        batchers = {"kokoro batcher": batcher}
        assert stalled(batchers, 60.0) is None and stalled(batchers, 0.1)[0] == "kokoro batcher"
        codes: list[int] = []
        with caplog.at_level(logging.ERROR, logger="cadence.engine"):
            await asyncio.wait_for(watch_ticks(batchers, 0.2, every_s=0.05, exit_process=codes.append), 5.0)
        assert codes == [STALL_EXIT_CODE]
        assert "kokoro batcher: a tick has run" in caplog.text and "supervisor to restart" in caplog.text
        model.release.set()  # the device answers again: the tick finishes and the batcher is idle
        assert len(await asyncio.wait_for(request.future, 30)) > 0
        assert batcher.stalled_s() == 0.0
    finally:
        model.release.set()
        batcher.close()


async def test_an_idle_or_busy_batcher_is_not_stalled(engine):
    batchers = hosted_batchers(engine, None)
    assert list(batchers) == ["kokoro batcher"]
    pieces = [p async for p in engine.synthesize_stream("Sure, I can help. Bye now.")]
    assert pieces and stalled(batchers, 5.0) is None
    codes: list[int] = []
    watcher = asyncio.ensure_future(watch_ticks(batchers, 5.0, every_s=0.02, exit_process=codes.append))
    await asyncio.sleep(0.2)
    watcher.cancel()
    assert codes == []


def test_engine_process_passes_the_stall_limit():
    from agent.config import Config

    config = Config()
    config.tts.engine = "kokoro"
    command = engine_command(config)
    assert command[command.index("--stall-exit-s") + 1] == "30.0"
    config.server.engine_stall_exit_s = 0.0  # off
    command = engine_command(config)
    assert command[command.index("--stall-exit-s") + 1] == "0.0"
