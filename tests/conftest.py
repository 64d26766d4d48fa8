"""Session fixtures shared across the test folders: the real embedded engines, the recorded utterances and
the loopback-ICE ``cadence serve`` (each started once, on first use); and how the suite is split over two
pytest-xdist workers (scripts/test.sh runs ``-n 2 --dist loadscope``)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from agent.config import Config
from agent.llm_server import ManagedLLMServer
from testkit.servers import cadence_serve

# Two pytest-xdist workers share the 2-core box (scripts/test.sh: ``-n 2 --dist loadscope``). The tests whose
# verdict depends on wall-clock time (audio played in real time, latency, pacing and turn-end bounds, shutdown and
# respawn deadlines, a reply within a fixed wait) form one work unit that the first worker, gw0, runs one after
# another, never two at once, as in a serial run. The other worker runs the rest meanwhile at the lowest CPU
# priority, its child processes too, so a burst of the timing-sensitive side (its llama.cpp threads, Whisper)
# takes the cores at once. Every other module is a unit of its own: a module- or package-scoped fixture (a
# server, a loaded model) is built once, on one worker, and a module's tests keep their order.
REALTIME = (
    "tests/phone/",  # real-time phone calls, pacing and barge-in bounds (one package-scoped server)
    "tests/test_webrtc_e2e.py", "tests/test_browser_page.py",  # the session's loopback-ICE server
    "tests/test_quiet_turn_end.py", "tests/test_finished_sentence_turn.py", "tests/test_finished_text_streaming.py",
    "tests/test_talk_words.py", "tests/test_talk_cli.py", "tests/test_llm_unreachable.py",
    "tests/test_speculative_tts_call.py", "tests/test_speculative_tool_call.py",  # real-time calls; a turn-stop timeout
    "tests/ops/test_gate_load_e2e.py", "tests/ops/test_budget_breach_e2e.py", "tests/ops/test_max_duration_goodbye.py",
    "tests/reliability/test_goodbye.py", "tests/reliability/test_phone_frames.py", "tests/reliability/test_slots.py",
    "tests/reliability/test_engine_process_serve.py", "tests/reliability/test_children.py",
    "tests/reliability/test_workers.py",
    "tests/bot/test_transcripts.py", "tests/bot/test_tool_flow.py",
    "tests/parakeet/test_speculative_llm.py", "tests/gputts/test_engine_process.py",
    "tests/parakeet/test_quiet_trigger_call.py", "tests/parakeet/test_pause_partial.py",  # the pause's decode in time
    "tests/turn/test_turn_engine.py",  # a real-time phone call through cadence serve
)
REALTIME_UNIT = "realtime"
REALTIME_WORKER = "gw0"
# The longest of the other modules start first (measured on the 2-core box), so none of them is left for the
# end while the other worker idles; the rest follow in collection order. Only the order depends on this list.
LONG_FIRST = (
    "tests/bot/test_long_call.py", "tests/bot/test_examples.py", "tests/bot/test_bot_tools.py",
    "tests/offline/test_ray.py", "tests/offline/test_host_workers.py", "tests/ops/test_llm_replicas.py",
    "tests/offline/test_streaming.py", "tests/gpu/test_fused_step.py", "tests/gpu/test_fused_ties.py",
    "tests/bot/test_call_lifecycle.py", "tests/offline/test_server_openai.py",
    "tests/parakeet/test_engine_process_asr.py", "tests/ops/test_connect_cycles.py",
)


def _unit(nodeid: str) -> str:
    module = nodeid.split("::", 1)[0]
    return REALTIME_UNIT if module.startswith(REALTIME) else module


def _split_runs(config: pytest.Config) -> bool:
    return config.getvalue("dist") == "loadscope"


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log):
    if not _split_runs(config):
        return None
    from xdist.scheduler import LoadScopeScheduling

    class RealtimeOnOneWorker(LoadScopeScheduling):
        """``--dist loadscope`` whose units are the modules, except the timing-sensitive ones: one unit, gw0's."""

        def _split_scope(self, nodeid: str) -> str:
            return _unit(nodeid)

        def _assign_work_unit(self, node) -> None:
            realtime = node.gateway.id == REALTIME_WORKER and REALTIME_UNIT in self.workqueue
            if not realtime and next(iter(self.workqueue)) == REALTIME_UNIT and len(self.workqueue) > 1:
                self.workqueue.move_to_end(REALTIME_UNIT)  # never the other worker's while gw0 is there
            elif realtime:
                self.workqueue.move_to_end(REALTIME_UNIT, last=False)
            super()._assign_work_unit(node)

    return RealtimeOnOneWorker(config, log)


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node) -> None:  # xdist controller, before the worker starts
    node.workerinput["cadence_background"] = _split_runs(node.config) and node.gateway.id != REALTIME_WORKER


def _stay_in_the_background() -> None:
    """Lowest CPU priority for this worker and, from a watcher thread, for its children in sessions of their own
    (llama.cpp servers, engine processes): with the kernel's autogroups a child that calls setsid() gets a
    scheduling group of its own at the default weight, which a nice value inside it does not lower."""
    import contextlib
    import os
    import threading

    import psutil

    with contextlib.suppress(OSError):
        os.nice(19)

    def group(pid: int | str) -> tuple[str, str] | None:
        """(name, nice) of a process's autogroup, from e.g. "/autogroup-5 nice 0"; None where the kernel gives none."""
        with open(f"/proc/{pid}/autogroup") as f:
            fields = f.read().split()
        return (fields[0], fields[2]) if len(fields) == 3 and fields[1] == "nice" else None

    try:
        mine = group("self")
    except OSError:
        mine = None
    if mine is None:
        return  # no autogroups here (a container may show an empty file): the nice value above is enough
    own = mine[0]

    def watch() -> None:
        me = psutil.Process()
        while True:
            for child in me.children(recursive=True):
                with contextlib.suppress(OSError, psutil.Error):
                    theirs = group(child.pid)
                    if theirs is None:
                        continue
                    name, nice = theirs
                    if name != own and nice != "19":
                        with open(f"/proc/{child.pid}/autogroup", "w") as f:
                            f.write("19")
            time.sleep(0.1)

    threading.Thread(target=watch, name="background-priority", daemon=True).start()


def pytest_configure(config: pytest.Config) -> None:
    if getattr(config, "workerinput", {}).get("cadence_background"):
        _stay_in_the_background()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not hasattr(config, "workerinput"):
        return  # a plain run keeps the collection order

    def rank(item: pytest.Item) -> tuple[int, int]:
        module = item.nodeid.split("::", 1)[0]
        if _unit(module) == REALTIME_UNIT:
            return (0, 0)
        if module in LONG_FIRST:
            return (1, LONG_FIRST.index(module))
        return (2, 0)

    items.sort(key=rank)  # stable: collection order within each rank


@dataclass
class Embedded:
    config: Config
    engines: object  # agent.pipeline.Engines
    llm: ManagedLLMServer


@pytest.fixture(scope="session")
def embedded() -> Iterator[Embedded]:
    """The embedded llama.cpp server and the loaded, warmed Engines (Whisper, Piper, VAD, smart-turn) of the
    default config, for the ops, reliability and talk tests that run whole sessions in process."""
    from agent.llm_server import embedded_llama_server
    from agent.pipeline import Engines

    config = Config()
    llm = embedded_llama_server(config.llm.threads, config.llm.context_size, config.llm.model,
                                config.llm.server_start_timeout_s).start()
    try:
        engines = Engines.load(config, llm.base_url, llm.model_id)
        yield Embedded(config, engines, llm)
    finally:
        llm.stop()


@pytest.fixture(scope="session")
def corpus(tmp_path_factory):
    from agent.capacity.corpus import load_corpus

    try:
        return load_corpus(Path(tmp_path_factory.mktemp("utterances")), 16000, limit=24)
    except FileNotFoundError as exc:
        pytest.skip(str(exc))


@pytest.fixture(scope="session")
def webrtc_server(tmp_path_factory) -> Iterator[dict]:
    """A real ``cadence serve`` (embedded models) offering only 127.0.0.1 as ICE host candidate, started once
    for the WebRTC client tests and the browser-page tests (idle in between: ~1% of a core)."""
    with cadence_serve("server.webrtc_ice_hosts=127.0.0.1",
                       log_path=tmp_path_factory.mktemp("logs") / "serve.log") as srv:
        yield srv
