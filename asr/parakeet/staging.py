"""A reusable (pinned, on CUDA) host buffer that batches windows of audio for one engine call.

``pad_batch`` allocates a fresh zeroed ``[B, N]`` tensor per call and fills it row by row: at a few
hundred 2 s streaming windows per tick that is a ~35 MB allocation plus a pageable host-to-device
copy, both paid with the GIL held while the event loop wants it. The staging buffer is allocated
once (grown by doubling), page-locked when the engine runs on CUDA, and filled with one
GIL-releasing copy per row; only each row's tail is zeroed.

One buffer per caller that serializes its engine calls (the stream batcher does): the next fill
must not start before the previous call's host-to-device copy finished, which the batcher's
per-tick host sync guarantees.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch


class AudioStaging:
    """``stage(windows)`` -> ``([B, N] float32 view of a reused buffer, lengths)``."""

    def __init__(self, pin: bool) -> None:
        self.pin = pin
        self._buffer = torch.empty(0, 0, dtype=torch.float32)
        self.allocations = 0
        self._in_use: torch.cuda.Event | None = None

    def mark_used(self) -> None:
        """Record (on the current CUDA stream) that the staged batch has been enqueued for copying."""
        if self.pin and torch.cuda.is_available():
            self._in_use = torch.cuda.Event()
            self._in_use.record()

    def _ensure(self, rows: int, cols: int) -> torch.Tensor:
        have_rows, have_cols = self._buffer.shape
        if rows > have_rows or cols > have_cols:
            rows = have_rows if rows <= have_rows else max(rows, 2 * have_rows)
            cols = have_cols if cols <= have_cols else max(cols, 2 * have_cols)
            self._buffer = torch.empty(rows, cols, dtype=torch.float32, pin_memory=self.pin)
            self.allocations += 1
        return self._buffer

    def stage(self, audios: Sequence[np.ndarray | torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        """Copy mono clips into the buffer, zero padded; returns a view of it and the lengths."""
        sizes = [len(a) for a in audios]
        lengths = torch.tensor(sizes, dtype=torch.long)
        width = max(sizes, default=0)
        if not audios or width == 0:
            return torch.zeros(len(audios), width, dtype=torch.float32), lengths
        if self._in_use is not None:  # the previous batch's asynchronous copy must have finished
            self._in_use.synchronize()
            self._in_use = None
        view = self._ensure(len(audios), width)[: len(audios), :width]
        for row, (audio, n) in zip(view, zip(audios, sizes, strict=True), strict=True):
            row[:n].copy_(torch.as_tensor(np.asarray(audio, dtype=np.float32)))
            if n < width:
                row[n:].zero_()
        return view, lengths
