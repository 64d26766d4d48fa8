"""A file "caller": plays utterances into the pipeline in real time and records the bot's audio.

Input is paced like a microphone (20 ms frames on a real-time clock) and keeps sending
silence between utterances, as a real line does, so VAD and turn detection behave exactly as
they do live. Output is a real-time sink: it records every audio chunk's arrival time.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from pipecat.frames.frames import InputAudioRawFrame, OutputAudioRawFrame, StartFrame
from pipecat.transports.base_input import BaseInputTransport
from pipecat.transports.base_output import BaseOutputTransport
from pipecat.transports.base_transport import BaseTransport, TransportParams

from transports.audio_io import to_pcm16

FRAME_S = 0.02


@dataclass
class CallScript:
    """Utterances (mono float32 at the input rate) and how to pace them."""

    utterances: list[np.ndarray]
    lead_silence_s: float = 0.5
    # After each utterance, wait for ``turn_done`` (set by the driver) or this long.
    max_wait_s: float = 20.0
    speech_end_times: list[float] = field(default_factory=list)
    turn_done: asyncio.Event = field(default_factory=asyncio.Event)
    finished: asyncio.Event = field(default_factory=asyncio.Event)


class FileInputTransport(BaseInputTransport):
    def __init__(self, params: TransportParams, script: CallScript, **kwargs):
        super().__init__(params, **kwargs)
        self._script = script
        self._feed_task: asyncio.Task | None = None

    async def start(self, frame: StartFrame):
        await super().start(frame)
        await self.set_transport_ready(frame)
        if self._feed_task is None:
            self._feed_task = self.create_task(self._feed())

    async def stop(self, frame):
        await self._cancel_feed()
        await super().stop(frame)

    async def cancel(self, frame):
        await self._cancel_feed()
        await super().cancel(frame)

    async def cleanup(self):
        # A caller that hangs up before the start reached the pipeline's end is only cleaned up.
        await self._cancel_feed()
        await super().cleanup()

    async def _cancel_feed(self) -> None:
        if self._feed_task is not None:
            await self.cancel_task(self._feed_task)
            self._feed_task = None

    async def _feed(self) -> None:
        rate = self.sample_rate
        n = int(rate * FRAME_S)
        silence = bytes(2 * n)
        clock = time.monotonic()

        async def push(pcm: bytes) -> None:
            nonlocal clock
            clock += FRAME_S
            await asyncio.sleep(max(0.0, clock - time.monotonic()))
            await self.push_audio_frame(InputAudioRawFrame(audio=pcm, sample_rate=rate, num_channels=1))

        for _ in range(int(self._script.lead_silence_s / FRAME_S)):
            await push(silence)
        for utterance in self._script.utterances:
            pcm = to_pcm16(utterance)
            pad = (-len(pcm)) % (2 * n)
            pcm += bytes(pad)
            for i in range(0, len(pcm), 2 * n):
                await push(pcm[i : i + 2 * n])
            # The caller's last sample has now left the "microphone".
            self._script.speech_end_times.append(time.monotonic())
            self._script.turn_done.clear()
            deadline = time.monotonic() + self._script.max_wait_s
            while not self._script.turn_done.is_set() and time.monotonic() < deadline:
                await push(silence)
        self._script.finished.set()
        while True:  # a live line never goes quiet: keep sending silence until stopped
            await push(silence)


class FileOutputTransport(BaseOutputTransport):
    """Collects the bot's audio with each chunk's arrival time (monotonic seconds)."""

    def __init__(self, params: TransportParams, **kwargs):
        super().__init__(params, **kwargs)
        self.chunks: list[tuple[float, bytes]] = []

    async def start(self, frame: StartFrame):
        await super().start(frame)
        await self.set_transport_ready(frame)

    async def write_audio_frame(self, frame: OutputAudioRawFrame) -> bool:
        self.chunks.append((time.monotonic(), frame.audio))
        # A real sink consumes audio in real time: take as long as the chunk lasts.
        await asyncio.sleep(len(frame.audio) / 2 / frame.sample_rate)
        return True

    def audio(self) -> bytes:
        return b"".join(pcm for _, pcm in self.chunks)

    def first_voiced_after(self, t: float, threshold: int = 200) -> float | None:
        """Arrival time of the first chunk after ``t`` whose peak exceeds ``threshold``."""
        for at, pcm in self.chunks:
            if at >= t and pcm and int(np.abs(np.frombuffer(pcm, dtype="<i2")).max()) > threshold:
                return at
        return None


class FileTransport(BaseTransport):
    def __init__(self, params: TransportParams, script: CallScript):
        super().__init__()
        self._input = FileInputTransport(params, script)
        self._output = FileOutputTransport(params)
        self._register_event_handler("on_client_disconnected")

    def input(self) -> FileInputTransport:
        return self._input

    def output(self) -> FileOutputTransport:
        return self._output


async def run_until_script_done(worker: Any, script: CallScript, linger_s: float = 0.2) -> None:
    """Run one pipecat ``PipelineWorker`` until ``script`` has played out (plus ``linger_s``), then cancel it."""
    from pipecat.workers.runner import WorkerRunner

    runner = WorkerRunner(handle_sigint=False, check_dangling_tasks=False)
    await runner.add_workers(worker)

    async def stop_when_finished() -> None:
        await script.finished.wait()
        await asyncio.sleep(linger_s)
        await worker.cancel(reason="script finished")

    stopper = asyncio.create_task(stop_when_finished())
    try:
        await runner.run()
    finally:
        stopper.cancel()
