"""Per-stream decoder carries kept on the device, moved in and out of a batch with index ops.

``LabelLoopingDecoder.prepare(carry=[...])`` copies each stream's carry with a few small kernels per
stream; at hundreds of streams per tick that is thousands of launches. A bank holds every stream's
LSTM state, predictor output, last label and time jump in ``[streams, ...]`` tensors; ``load``
gathers the rows of a batch into a prepared :class:`DecoderState` and ``store`` scatters them back
after the loop: a dozen launches whatever the batch size.
"""

from __future__ import annotations

import torch

from asr.parakeet.decoding.label_looping import DecoderState, LabelLoopingDecoder


class CarryBank:
    """Decoder carries of ``streams`` streams on the decoder's device."""

    def __init__(self, decoder: LabelLoopingDecoder, streams: int) -> None:
        init = decoder.initial_carry()
        self.h0, self.c0, self.pred0, self.label0 = init.h, init.c, init.pred_out, init.last_label
        layers, hidden = init.h.shape
        device = init.h.device
        self.h = torch.empty(layers, streams, hidden, dtype=init.h.dtype, device=device)
        self.c = torch.empty_like(self.h)
        self.pred_out = torch.empty(streams, init.pred_out.shape[0], dtype=init.pred_out.dtype, device=device)
        self.last_label = torch.empty(streams, dtype=torch.long, device=device)
        self.time_jump = torch.empty(streams, dtype=torch.long, device=device)
        self.reset()

    @property
    def streams(self) -> int:
        """How many streams' carries the bank holds."""
        return self.last_label.shape[0]

    def grow(self, streams: int) -> None:
        """Hold at least ``streams`` streams: existing rows keep their carries, new rows start fresh.

        (Not under inference mode, like ``__init__``: the bank's tensors stay writable by ``reset``.)
        """
        old = self.streams
        if streams <= old:
            return
        h = self.h.new_empty(self.h.shape[0], streams, self.h.shape[2])
        c = torch.empty_like(h)
        pred_out = self.pred_out.new_empty(streams, self.pred_out.shape[1])
        last_label = self.last_label.new_empty(streams)
        time_jump = self.time_jump.new_empty(streams)
        h[:, :old], c[:, :old], pred_out[:old] = self.h, self.c, self.pred_out
        last_label[:old], time_jump[:old] = self.last_label, self.time_jump
        self.h, self.c, self.pred_out, self.last_label, self.time_jump = h, c, pred_out, last_label, time_jump
        self.reset(torch.arange(old, streams, device=h.device))

    def reset(self, rows: torch.Tensor | None = None) -> None:
        """Start streams (all, or ``rows``) from the decoder's start state."""
        index = slice(None) if rows is None else rows
        self.h[:, index] = self.h0.unsqueeze(1)
        self.c[:, index] = self.c0.unsqueeze(1)
        self.pred_out[index] = self.pred0
        self.last_label[index] = self.label0
        self.time_jump[index] = 0

    @torch.inference_mode()
    def load(self, state: DecoderState, rows: torch.Tensor) -> None:
        """Overwrite the first ``len(rows)`` elements of a prepared state with these streams' carries."""
        b = rows.shape[0]
        state.h[:, :b] = self.h[:, rows]
        state.c[:, :b] = self.c[:, rows]
        state.pred_out[:b] = self.pred_out[rows]
        state.last_label[:b] = self.last_label[rows]
        state.time[:b] += self.time_jump[rows]
        # Re-derive what prepare() computed from the start time (as LabelLoopingDecoder._refresh_time).
        state.label_time.copy_(state.time)
        torch.minimum(state.time, state.last_frame, out=state.safe_time)
        torch.lt(state.time, state.lengths, out=state.active)
        torch.any(state.active, out=state.outer_active)

    @torch.inference_mode()
    def store(self, state: DecoderState, rows: torch.Tensor) -> None:
        """Save the carries of the first ``len(rows)`` elements after the loop."""
        b = rows.shape[0]
        self.h[:, rows] = state.h[:, :b]
        self.c[:, rows] = state.c[:, :b]
        self.pred_out[rows] = state.pred_out[:b]
        self.last_label[rows] = state.last_label[:b]
        self.time_jump[rows] = torch.clamp(state.time[:b] - state.lengths[:b], min=0)
