"""One smart-turn model per process, scoring every pending request in one batched call.

``TurnBatcher.predict(audio)`` (16 kHz float32, any length) queues the request and returns the probability
that the turn is complete. One task drains the queue: whatever is pending when the model is free goes in
one batch (at most ``max_batch``, padded up to the next bucket size so the device sees a few shapes), run in
a worker thread so the event loop keeps serving. While a batch runs, new requests gather for the next.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass, field

import numpy as np

from agent.smart_turn.features import SAMPLES

BUCKETS = (1, 2, 4, 8, 16, 32, 64)


@dataclass
class TurnStats:
    requests: int = 0
    batches: int = 0
    busy_s: float = 0.0  # wall time of the batched model calls
    batch_sizes: dict[int, int] = field(default_factory=dict)


def bucket(n: int, max_batch: int) -> int:
    """The smallest bucket size that holds ``n`` requests (``max_batch`` past the largest)."""
    return next((b for b in BUCKETS if b >= n and b <= max_batch), max_batch)


class TurnBatcher:
    """smart-turn v3 on ``device`` (``"cpu"``, ``"cuda"``, ``"cuda:1"``), batched (see the module docstring)."""

    def __init__(self, model=None, device: str = "cpu", max_batch: int = 64, dtype: str = "float32",
                 weights: str = ""):
        try:
            import torch
        except ImportError as exc:
            raise ImportError('vad.turn_model = "engine" needs torch: pip install "cadence[parakeet]"') from exc

        from agent.smart_turn.features import LogMel
        from agent.smart_turn.onnx_weights import load_model

        self.torch = torch
        self.device = torch.device(device)
        self.dtype = getattr(torch, dtype)
        self.model = (model or load_model(weights or None)).to(self.device, self.dtype).eval()
        self.features = LogMel(self.device)
        self.max_batch = max_batch
        self.stats = TurnStats()
        self._pending: list[tuple[np.ndarray, asyncio.Future]] = []  # (16 kHz audio, its probability)
        self._wake: asyncio.Event | None = None
        self._task: asyncio.Task | None = None
        self._batch_started = 0.0  # monotonic seconds when the batch being scored began (0: none)
        cuda = self.device.type == "cuda"
        self._staging = torch.zeros((max_batch, SAMPLES), dtype=torch.float32, pin_memory=cuda)
        self._dirty_rows = 0  # rows of the staging buffer past which it is all zeros
        # A stream of its own, at high priority: a turn decision is on the path to the reply, and the process it
        # shares (streaming Parakeet's) keeps the default stream busy with encoder ticks (run 58: 50 ms a batch
        # in the cascade against 3-5 ms alone). Without it the batch queues behind whatever Parakeet launched.
        self._stream = torch.cuda.Stream(self.device, priority=-1) if cuda else None

    def score(self, audios, rows: int = 0) -> np.ndarray:
        """Probabilities for each 16 kHz float32 audio of ``audios`` (its last 8 s, zeros in front), run as a batch
        of ``rows`` (>= len(audios); the extra rows are silence). Blocking. Each audio is written once, straight
        into the pinned staging buffer: no padded host copy per request or per batch."""
        torch = self.torch
        n = len(audios)
        rows = max(rows, n)
        if rows > self.max_batch:
            raise ValueError(f"a batch of {rows} exceeds this batcher's max_batch of {self.max_batch}")
        staging = self._staging
        dirty = self._dirty_rows = max(self._dirty_rows, n)  # (set first: a failed write still counts)
        rows_np = staging.numpy()  # written through numpy: a read-only request buffer (the socket's bytes) copies in
        for i, audio in enumerate(audios):  # as is, where torch.from_numpy warns about non-writable arrays
            audio = np.asarray(audio, dtype=np.float32).reshape(-1)[-SAMPLES:]
            rows_np[i, : SAMPLES - audio.size] = 0.0
            rows_np[i, SAMPLES - audio.size:] = audio
        # the padding rows are silence: zero only those an earlier, larger batch left audio in (a bucket's padding is
        # up to half of it, 512 KB a row: not rewritten every call)
        staging[n:min(rows, dirty)].zero_()
        self._dirty_rows = n if dirty <= rows else dirty
        on_stream = torch.cuda.stream(self._stream) if self._stream is not None else contextlib.nullcontext()
        with torch.inference_mode(), on_stream:
            audio = staging[:rows].to(self.device, non_blocking=True)
            probs = self.model(self.features(audio).to(self.dtype))
            return probs.float().cpu().numpy()[:n]  # the copy back waits for this stream's work only

    def warm(self) -> None:
        """One call per bucket: the device's kernels chosen and its memory reserved before the first caller."""
        for b in BUCKETS:
            if b <= self.max_batch:
                self.score([], rows=b)

    async def predict(self, audio: np.ndarray) -> float:
        """The probability that the turn in ``audio`` (16 kHz float32, its last 8 s count) is complete."""
        loop = asyncio.get_running_loop()
        if self._task is None or self._task.done():
            self._wake = asyncio.Event()
            self._task = loop.create_task(self._run())
        future: asyncio.Future = loop.create_future()
        self._pending.append((audio, future))
        self.stats.requests += 1
        assert self._wake is not None
        self._wake.set()
        return await future

    async def _run(self) -> None:
        assert self._wake is not None
        while True:
            await self._wake.wait()
            self._wake.clear()
            while self._pending:
                batch = [(w, f) for w, f in self._pending[: self.max_batch] if not f.done()]
                del self._pending[: self.max_batch]
                if not batch:
                    continue
                n = len(batch)
                t0 = time.perf_counter()
                self._batch_started = time.monotonic()
                try:
                    probs = await asyncio.to_thread(self.score, [a for a, _ in batch], bucket(n, self.max_batch))
                except Exception as exc:  # every waiter of this batch hears why; the batcher goes on
                    for _, f in batch:
                        if not f.done():
                            f.set_exception(exc)
                    continue
                finally:
                    self._batch_started = 0.0
                    self.stats.busy_s += time.perf_counter() - t0
                self.stats.batches += 1
                self.stats.batch_sizes[n] = self.stats.batch_sizes.get(n, 0) + 1
                for (_, f), p in zip(batch, probs[:n], strict=True):
                    if not f.done():
                        f.set_result(float(p))

    def stalled_s(self) -> float:
        """How long the batch being scored has run, in seconds (0: none): the engine's watchdog reads it."""
        started = self._batch_started
        return time.monotonic() - started if started else 0.0

    async def aclose(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        for _, f in self._pending:
            if not f.done():
                f.cancel()
        self._pending.clear()
