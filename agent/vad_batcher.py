"""Silero VAD windows of every caller in a process scored together, one ONNX call per tick.

Stock pipecat scores each caller's 32 ms window alone, on that caller's own one-thread executor:
one ONNX run (~120 us on the 2-core box) plus an executor hop per window per caller. With a few
hundred callers per process that is the largest share of a session worker's CPU (py-spy, NOTES.md
"Where a phone session's CPU goes"). Silero's recurrent state and audio context are per caller and
the model takes a batch, so the windows that are waiting at one moment go in one run (~42 us per
window at 64): :class:`SileroBatcher` collects them while the previous run is in flight (no timer,
no added wait when the process is idle) and answers each caller's future.

:class:`BatchedSileroVADAnalyzer` is pipecat 1.14's ``SileroVADAnalyzer`` with the window scored
through the batcher; its state machine, volume gate and model resets are stock, window by window.
"""

from __future__ import annotations

import asyncio
import weakref
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
import onnxruntime as ort
from pipecat.audio.utils import exp_smoothing
from pipecat.audio.vad.vad_analyzer import VADParams, VADState

from agent.shared_models import SharedSileroVADAnalyzer, silero_session


@dataclass
class _Window:
    """One caller's window (context + samples) and recurrent state, waiting for its score."""

    audio: np.ndarray  # (context + window,) float32
    state: np.ndarray  # (2, 128) float32
    future: asyncio.Future


@dataclass
class SileroBatcherStats:
    """What the batcher has done: runs, windows scored, the largest batch."""

    runs: int = 0
    windows: int = 0
    max_batch: int = 0

    @property
    def mean_batch(self) -> float:
        return self.windows / self.runs if self.runs else 0.0


class SileroBatcher:
    """Scores the Silero windows waiting in one event loop in one ONNX run per sample rate."""

    def __init__(self, session: ort.InferenceSession, max_batch: int = 512):
        self._session = session
        self._max_batch = max_batch
        self._pending: dict[int, list[_Window]] = {}
        self._draining = False
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="silero-batch")
        self.stats = SileroBatcherStats()

    async def score(self, audio: np.ndarray, state: np.ndarray, sample_rate: int) -> tuple[float, np.ndarray]:
        """Voice confidence of one window (context prepended) and the caller's next state."""
        loop = asyncio.get_running_loop()
        window = _Window(audio, state, loop.create_future())
        self._pending.setdefault(sample_rate, []).append(window)
        if not self._draining:
            self._draining = True
            loop.create_task(self._drain())
        return await window.future

    async def _drain(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            await asyncio.sleep(0)  # let the callers whose audio arrived in this loop pass join
            while self._pending:
                rate, windows = next(iter(self._pending.items()))
                batch, rest = windows[: self._max_batch], windows[self._max_batch:]
                if rest:
                    self._pending[rate] = rest
                else:
                    del self._pending[rate]
                try:
                    probs, states = await loop.run_in_executor(self._executor, self._run, rate, batch)
                except Exception as exc:  # noqa: BLE001 - every waiting caller hears why
                    for w in batch:
                        if not w.future.done():
                            w.future.set_exception(exc)
                    continue
                for i, w in enumerate(batch):
                    if not w.future.done():
                        w.future.set_result((float(probs[i]), states[:, i]))
        finally:
            self._draining = False

    def _run(self, rate: int, batch: list[_Window]) -> tuple[np.ndarray, np.ndarray]:
        x = np.stack([w.audio for w in batch])
        state = np.stack([w.state for w in batch], axis=1)  # (2, B, 128), a fresh C-contiguous array
        out, new_state = self._session.run(None, {"input": x, "state": state, "sr": np.array(rate, dtype="int64")})
        n = len(batch)
        self.stats.runs += 1
        self.stats.windows += n
        self.stats.max_batch = max(self.stats.max_batch, n)
        return np.asarray(out).reshape(n, -1)[:, 0], np.asarray(new_state)

    def close(self) -> None:
        self._executor.shutdown(wait=False)


_BATCHERS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, SileroBatcher] = weakref.WeakKeyDictionary()


def totals() -> tuple[int, int]:
    """Windows scored and ONNX runs over every live batcher of this process."""
    stats = [b.stats for b in list(_BATCHERS.values())]
    return sum(s.windows for s in stats), sum(s.runs for s in stats)


def loop_batcher() -> SileroBatcher:
    """The running event loop's batcher (one per loop: the callers of a process share it)."""
    loop = asyncio.get_running_loop()
    batcher = _BATCHERS.get(loop)
    if batcher is None:
        batcher = _BATCHERS[loop] = SileroBatcher(silero_session())
    return batcher


class BatchedSileroVADAnalyzer(SharedSileroVADAnalyzer):
    """``SileroVADAnalyzer`` whose windows are scored with every other caller's of this process."""

    def __init__(self, *, sample_rate: int | None = None, params: VADParams | None = None,
                 batcher: SileroBatcher | None = None, quiet_gate: bool = False):
        super().__init__(sample_rate=sample_rate, params=params, quiet_gate=quiet_gate)
        self._batcher = batcher

    async def analyze_audio(self, buffer: bytes) -> VADState:
        """Stock ``_run_analyzer`` window by window, each window's score awaited from the batcher."""
        self._vad_buffer += buffer
        n = self._vad_frames_num_bytes
        if len(self._vad_buffer) < n:
            return self._vad_state
        while len(self._vad_buffer) >= n:
            frames = self._vad_buffer[:n]
            self._vad_buffer = self._vad_buffer[n:]
            confidence = await self._confidence(frames)
            volume = exp_smoothing(self._window_volume(frames), self._prev_volume, self._smoothing_factor)
            self._prev_volume = volume
            self._step(confidence >= self._params.confidence and volume >= self._params.min_volume)
        return self._settle()

    def _window_volume(self, frames: bytes) -> float:
        self._volume_tracker.update(frames, self.sample_rate)
        return self._volume_tracker.volume

    async def _confidence(self, frames: bytes) -> float:
        model = self._model
        rate = self.sample_rate
        samples = np.frombuffer(frames, np.int16).astype(np.float32)
        samples *= 1.0 / 32768.0
        context_size = 64 if rate == 16000 else 32
        if model._last_sr != rate or model._state.shape[1] != 1:
            model.reset_states(1)
        if model._context.shape[1] != context_size:
            model._context = np.zeros((1, context_size), dtype=np.float32)
        audio = np.concatenate((model._context[0], samples))
        batcher = self._batcher or loop_batcher()
        try:
            confidence, state = await batcher.score(audio, model._state[:, 0], rate)
        except Exception as exc:  # noqa: BLE001 - as stock: a failed window reads as silence
            from loguru import logger

            logger.error(f"Error analyzing audio with Silero VAD: {exc}")
            return 0.0
        model._state = state[:, None, :]  # a view of the batch's output: the next window's batch copies it
        model._context = audio[None, -context_size:]
        model._last_sr = rate
        model._last_batch_size = 1
        self._maybe_reset_model(confidence)
        return confidence

    def _step(self, speaking: bool) -> None:
        """One window of pipecat's VAD state machine (``VADAnalyzer._run_analyzer``)."""
        state = self._vad_state
        if speaking:
            if state == VADState.QUIET:
                self._vad_state = VADState.STARTING
                self._vad_starting_count = 1
            elif state == VADState.STARTING:
                self._vad_starting_count += 1
            elif state == VADState.STOPPING:
                self._vad_state = VADState.SPEAKING
                self._vad_stopping_count = 0
        elif state == VADState.STARTING:
            self._vad_state = VADState.QUIET
            self._vad_starting_count = 0
        elif state == VADState.SPEAKING:
            self._vad_state = VADState.STOPPING
            self._vad_stopping_count = 1
        elif state == VADState.STOPPING:
            self._vad_stopping_count += 1

    def _settle(self) -> VADState:
        if self._vad_state == VADState.STARTING and self._vad_starting_count >= self._vad_start_frames:
            self._vad_state = VADState.SPEAKING
            self._vad_starting_count = 0
        if self._vad_state == VADState.STOPPING and self._vad_stopping_count >= self._vad_stop_frames:
            self._vad_state = VADState.QUIET
            self._vad_stopping_count = 0
        return self._vad_state
