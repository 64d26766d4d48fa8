"""Batch a tick's audio windows onto the engine's device in a constant number of operations.

``pad_batch`` allocates a fresh zeroed ``[B, N]`` tensor per call and fills it row by row: at a few
hundred 2 s streaming windows per tick that is a ~35 MB allocation, a pageable host-to-device copy
and two torch calls per window. Each of those calls releases the GIL, and under load the event loop
takes it back for up to the switch interval every time (on the H200 the padding measured 9 ms per
tick at 512 callers where it takes ~1 ms alone).

On CUDA the windows are concatenated with one ``np.concatenate`` into a reused page-locked flat
buffer, copied to the device asynchronously in one piece, and padded there with one gather:
about eight operations whatever the batch size. ``np.concatenate`` keeps the GIL for the whole copy
(~0.5 ms for 48 two-second windows) where ``torch.as_tensor`` + ``torch.cat`` took ~4x longer and
let the event loop in between; on the H200 the padding was 70 us per window at 512 callers. On the
CPU rows are copied into a zeroed batch.

One staging object per caller that serializes its engine calls (the stream batcher does): before
the next fill, the previous batch's host-to-device copy is waited for (a recorded CUDA event).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch


class AudioStaging:
    """``stage(windows)`` -> ``([B, N] float32 on the device, zero padded; lengths on the host)``."""

    def __init__(self, device: torch.device | str = "cpu") -> None:
        self.device = torch.device(device)
        self.pin = self.device.type == "cuda"
        self._host = torch.empty(0, dtype=torch.float32)
        self._device_flat = torch.empty(0, dtype=torch.float32, device=self.device)
        self._copied: torch.cuda.Event | None = None
        self.allocations = 0

    def _grow(self, total: int) -> None:
        if total > self._host.numel():
            size = max(total, 2 * self._host.numel())
            self._host = torch.empty(size, dtype=torch.float32, pin_memory=self.pin)
            self.allocations += 1
        if total > self._device_flat.numel():
            self._device_flat = torch.empty(max(total, 2 * self._device_flat.numel()), dtype=torch.float32,
                                            device=self.device)

    def stage(self, audios: Sequence[np.ndarray | torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        """Mono clips -> a zero-padded batch on the device and their lengths (host tensor)."""
        sizes = [len(a) for a in audios]
        lengths = torch.tensor(sizes, dtype=torch.long)
        width, total = max(sizes, default=0), sum(sizes)
        if total == 0:
            return torch.zeros(len(audios), width, dtype=torch.float32, device=self.device), lengths
        parts = [_as_numpy(a) for a in audios]
        if self.device.type == "cpu":  # no GPU to pad on, no event loop to starve: plain row copies
            padded = torch.zeros(len(parts), width, dtype=torch.float32)
            rows = padded.numpy()
            for row, part in zip(rows, parts, strict=True):
                row[: part.size] = part
            return padded, lengths
        if self._copied is not None:  # the previous batch's copy must be done before the buffer is refilled
            self._copied.synchronize()
            self._copied = None
        host = self.fill_host(parts)
        flat = self._device_flat[:total]
        flat.copy_(host, non_blocking=True)
        self._copied = torch.cuda.Event()
        self._copied.record()
        return unflatten_padded(flat, sizes), lengths

    def fill_host(self, parts: Sequence[np.ndarray]) -> torch.Tensor:
        """The clips concatenated into the reused host buffer (pinned on CUDA), in one GIL-holding copy."""
        total = sum(part.size for part in parts)
        self._grow(total)
        host = self._host[:total]
        if total:
            np.concatenate(parts, out=host.numpy())
        return host


def _as_numpy(audio: np.ndarray | torch.Tensor) -> np.ndarray:
    """A mono clip as a flat float32 array (a view when it already is one)."""
    if isinstance(audio, torch.Tensor):
        audio = audio.detach().to("cpu", torch.float32).numpy()
    return np.asarray(audio, dtype=np.float32).reshape(-1)


def unflatten_padded(flat: torch.Tensor, sizes: Sequence[int]) -> torch.Tensor:
    """Concatenated clips -> ``[B, max(sizes)]`` zero padded, with one gather on ``flat``'s device."""
    total, width = sum(sizes), max(sizes, default=0)
    if total == 0:
        return torch.zeros(len(sizes), width, dtype=flat.dtype, device=flat.device)
    # padded[i, j] = flat[offset[i] + j] where j < size[i], else 0
    offsets = np.zeros(len(sizes), dtype=np.int64)
    np.cumsum(sizes[:-1], out=offsets[1:])
    meta = torch.from_numpy(np.stack([offsets, np.asarray(sizes, dtype=np.int64)])).to(flat.device)
    cols = torch.arange(width, device=flat.device)
    index = (meta[0, :, None] + cols).clamp_(max=total - 1)
    return torch.where(cols < meta[1, :, None], flat[index], 0.0)
