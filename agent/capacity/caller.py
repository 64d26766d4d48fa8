"""One synthetic caller: talks in real time through the real pipeline and listens to the reply.

The microphone side is ``transports.file_transport.FileInputTransport`` (20 ms frames on a
real-time clock, silence between utterances). The ear is ``ListeningOutput``: like a
WebRTC client's jitter buffer it takes each chunk the moment the pipeline hands it over and
records its arrival, so what is measured is how far the pipeline keeps ahead of playback.
The caller waits until the reply has *played* (plus a short pause) before speaking again,
and hangs up like a client disconnecting.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from pipecat.frames.frames import OutputAudioRawFrame, StartFrame
from pipecat.observers.base_observer import BaseObserver
from pipecat.transports.base_output import BaseOutputTransport
from pipecat.transports.base_transport import BaseTransport, TransportParams

from agent.capacity.corpus import Utterance
from agent.capacity.phone_caller import LONGEST_REPLY_S
from transports.file_transport import CallScript, FileInputTransport

RunCaller = Callable[[BaseTransport, str], Awaitable[None]]


@dataclass
class CallRecord:
    """Everything one caller saw; times are ``time.monotonic()`` seconds."""

    caller: int
    utterances: list[str] = field(default_factory=list)
    speech_ends: list[float] = field(default_factory=list)
    speech_seconds: list[float] = field(default_factory=list)
    chunks: list[tuple[float, float]] = field(default_factory=list)  # (arrival, audio seconds)
    connected_at: float = 0.0
    ended_at: float = 0.0
    refused: str | None = None


class ListeningOutput(BaseOutputTransport):
    """Records every output chunk's arrival; tracks when its playback would end."""

    def __init__(self, params: TransportParams, record: CallRecord, **kwargs):
        super().__init__(params, **kwargs)
        self.record = record
        self.last_arrival = 0.0
        self.play_end = 0.0
        # Set once the StartFrame reached the output: every stage before it has started.
        self.started = asyncio.Event()

    async def start(self, frame: StartFrame):
        await super().start(frame)
        await self.set_transport_ready(frame)
        self.started.set()

    async def write_audio_frame(self, frame: OutputAudioRawFrame) -> bool:
        now = time.monotonic()
        seconds = len(frame.audio) / (2.0 * frame.sample_rate * max(frame.num_channels, 1))
        self.record.chunks.append((now, seconds))
        self.last_arrival = now
        self.play_end = max(self.play_end, now) + seconds
        return True


class _Started(BaseObserver):
    def __init__(self, event: asyncio.Event):
        super().__init__(observe_every_push=False)
        self._event = event

    async def on_pipeline_started(self):
        self._event.set()


class StartWatch:
    """A server observer factory: one event per session, set once its whole pipeline has started.

    ``CallerTransport``'s output starting is not enough: the StartFrame may not have reached
    the end of the pipeline yet, and a pipeline cancelled before that is only cleaned up.
    """

    def __init__(self) -> None:
        self._events: dict[str, asyncio.Event] = {}

    def __call__(self, session_id: str) -> BaseObserver:
        return _Started(self.event(session_id))

    def event(self, session_id: str) -> asyncio.Event:
        return self._events.setdefault(session_id, asyncio.Event())

    def forget(self, session_id: str) -> None:
        self._events.pop(session_id, None)


class CallerTransport(BaseTransport):
    def __init__(self, params: TransportParams, script: CallScript, record: CallRecord):
        super().__init__()
        self._input = FileInputTransport(params, script)
        self._output = ListeningOutput(params, record)
        self._register_event_handler("on_client_disconnected")

    def input(self) -> FileInputTransport:
        return self._input

    def output(self) -> ListeningOutput:
        return self._output

    async def hang_up(self) -> None:
        await self._call_event_handler("on_client_disconnected", self)


async def _take_turns(script: CallScript, ear: ListeningOutput, record: CallRecord, stop_at: float,
                      max_wait_s: float, pause_s: float) -> None:
    """Speak the next utterance once the last reply has played, until ``stop_at``."""
    handled = 0
    while True:
        while len(script.speech_end_times) <= handled:
            if script.finished.is_set():
                return
            with contextlib.suppress(TimeoutError):  # back at once when the script ends
                await asyncio.wait_for(script.finished.wait(), 0.02)
        eos = script.speech_end_times[handled]
        record.speech_ends.append(eos)
        handled += 1
        deadline = eos + max_wait_s
        while ear.last_arrival < eos and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        # The reply is over once playback has ended and nothing new came for ``pause_s``; a reply that came is
        # heard out however long it is (up to LONGEST_REPLY_S more), as a phone caller does.
        if ear.last_arrival >= eos:
            deadline += LONGEST_REPLY_S
        while time.monotonic() < deadline:
            done_at = max(ear.play_end, ear.last_arrival) + pause_s
            if ear.last_arrival >= eos and time.monotonic() >= done_at:
                break
            await asyncio.sleep(0.05)
        if time.monotonic() >= stop_at:
            return
        script.turn_done.set()


async def call(run_caller: RunCaller, params: TransportParams, caller: int, utterances: list[Utterance], *,
               stop_at: float, max_wait_s: float = 15.0, pause_s: float = 0.6, lead_silence_s: float = 0.3,
               admit: Callable[[], Awaitable[str | None]] | None = None,
               leave: Callable[[], None] | None = None, watch: StartWatch | None = None) -> CallRecord:
    """Connect (through ``admit`` if given), talk until ``stop_at``, hang up; return the record.

    With ``watch`` (installed in the server's observer factories) the caller hangs up only once
    its pipeline has fully started, as a client does once connected; without it, as soon as
    its own output has started.
    """
    record = CallRecord(caller, [u.name for u in utterances], speech_seconds=[u.seconds for u in utterances])
    if admit is not None:
        refused = await admit()
        if refused is not None:
            record.refused = refused
            record.ended_at = time.monotonic()
            return record
    script = CallScript([u.audio for u in utterances], lead_silence_s=lead_silence_s,
                        max_wait_s=max_wait_s + 10.0)
    transport = CallerTransport(params, script, record)
    record.connected_at = time.monotonic()
    session_id = f"caller-{caller}"
    connected = watch.event(session_id) if watch is not None else transport.output().started
    session = asyncio.create_task(run_caller(transport, session_id))
    turns = asyncio.create_task(_take_turns(script, transport.output(), record, stop_at, max_wait_s, pause_s))
    try:
        await asyncio.wait({session, turns}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        turns.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await turns
        if not session.done():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(connected.wait(), 10.0)
            await transport.hang_up()
            try:
                await asyncio.wait_for(session, 10.0)
            except TimeoutError:
                session.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await session
        if session.done() and not session.cancelled() and session.exception() is not None:
            record.refused = f"session failed: {session.exception()!r}"
        record.ended_at = time.monotonic()
        if watch is not None:
            watch.forget(session_id)
        if leave is not None:
            leave()
    return record
