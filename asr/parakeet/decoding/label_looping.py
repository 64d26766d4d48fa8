"""Batched greedy TDT decoding by label looping (NeMo's algorithm), written for CUDA-graph capture.

Semantics (NeMo ``GreedyBatchedTDTLabelLoopingComputer``): project the encoder output once; at
each step the label is the argmax over the ``V+1`` token logits and the jump is
``durations[argmax over the duration logits]``; a blank with duration 0 jumps 1; time advances
by the jump on every step; after ``max_symbols_per_frame`` labels on one frame, time is forced one
frame forward; the LSTM advances only for elements that emitted a label.

Loop shape (one predictor step per emitted label, as many joint-only steps as blanks need)::

    decoder.prepare(state, enc_proj, lengths)
    while state.outer_active:      # a WHILE node on the GPU
        decoder.outer_step(state)  # predictor step for labels just found, then joint at current frames
        while state.inner_active:  # a nested WHILE node
            decoder.inner_step(state)  # joint only, for elements whose label was blank
    results = decoder.collect(state)

Both steps are in-place and pure-tensor: no ``.item()``, no ``nonzero``, no boolean-mask
indexing, no data-dependent shapes. Every tensor they touch lives in :class:`DecoderState`
(allocated once by :meth:`LabelLoopingDecoder.alloc`); ``state.outer_active`` and
``state.inner_active`` are device scalars refreshed at the end of each step and by ``prepare``.
Tokens are written as soon as they are found (a scatter at each element's write cursor), so the
loop exits with nothing pending. An element that found a label stays "outer active" until its
predictor step ran, so the carry after the loop includes the state after the last label.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import nn


@dataclass
class DecodedSeq:
    """One element's result. ``frames`` count from the element's first decoded frame."""

    tokens: list[int]
    frames: list[int]  # encoder frame where each token was emitted
    durations: list[int]  # predicted duration (frames) of each token


@dataclass
class DecoderCarry:
    """What a stream carries from one chunk to the next (tensors on the decoder's device)."""

    h: torch.Tensor  # [layers, pred_hidden] LSTM hidden state
    c: torch.Tensor  # [layers, pred_hidden] LSTM cell state
    pred_out: torch.Tensor  # [joint_hidden] projected predictor output after the last label
    last_label: torch.Tensor  # 0-dim long; blank if nothing was emitted yet
    time_jump: torch.Tensor  # 0-dim long; frames past the chunk's end where the last jump landed


@dataclass
class DecoderState:
    """Every tensor the loop touches, preallocated for ``batch_size`` x ``max_frames``."""

    batch_size: int
    max_frames: int
    capacity: int  # tokens per element the output buffers hold
    # inputs
    enc_proj: torch.Tensor  # [B, T, H] projected encoder output
    lengths: torch.Tensor  # [B] long: end frame (exclusive); 0 for unused rows
    start: torch.Tensor  # [B] long: first frame to decode
    last_frame: torch.Tensor  # [B] long: max(lengths - 1, 0)
    # time
    time: torch.Tensor  # [B] long: current frame
    safe_time: torch.Tensor  # [B] long: min(time, last_frame), safe to gather
    label_time: torch.Tensor  # [B] long: frame of the current label
    # predictor
    h: torch.Tensor  # [L, B, P]
    c: torch.Tensor  # [L, B, P]
    pred_out: torch.Tensor  # [B, H]
    # current step
    labels: torch.Tensor  # [B] long
    scores: torch.Tensor  # [B] float: max token logit
    dur_index: torch.Tensor  # [B] long: argmax over duration logits
    durations: torch.Tensor  # [B] long: jump of the current step
    enc_at: torch.Tensor  # [B, H] scratch: encoder projection at safe_time
    hidden: torch.Tensor  # [B, H] scratch: joint hidden
    logits: torch.Tensor  # [B, V+1+D] scratch
    flat_index: torch.Tensor  # [B] long scratch: row index into enc_proj viewed [B*T, H]
    new_labels: torch.Tensor  # [B] long scratch (inner step)
    new_scores: torch.Tensor  # [B] float scratch (inner step)
    # masks
    active: torch.Tensor  # [B] bool: time < lengths
    advance: torch.Tensor  # [B] bool: still searching past blanks in the inner loop
    found: torch.Tensor  # [B] bool: found a label this iteration, predictor step pending
    is_blank: torch.Tensor  # [B] bool scratch
    emit: torch.Tensor  # [B] bool scratch
    # max-symbols bookkeeping
    last_emit_time: torch.Tensor  # [B] long: frame of the last emitted token (-1: none)
    symbols_on_frame: torch.Tensor  # [B] long: tokens emitted on last_emit_time
    last_label: torch.Tensor  # [B] long: last emitted token (blank: none)
    # outputs
    out_tokens: torch.Tensor  # [B, capacity + 1] long (last column: overflow slot)
    out_frames: torch.Tensor  # [B, capacity + 1] long
    out_durations: torch.Tensor  # [B, capacity + 1] long
    out_len: torch.Tensor  # [B] long: write cursor
    write_pos: torch.Tensor  # [B, 1] long scratch
    # constants
    batch_index: torch.Tensor  # [B] long: arange(B)
    row_offset: torch.Tensor  # [B] long: arange(B) * T
    duration_values: torch.Tensor  # [D] long
    sos_h: torch.Tensor  # [L, P] predictor state after <blank> from a zero state
    sos_c: torch.Tensor  # [L, P]
    sos_pred_out: torch.Tensor  # [H]
    # loop conditions (0-dim bool device scalars)
    outer_active: torch.Tensor
    inner_active: torch.Tensor


class LabelLoopingDecoder(nn.Module):
    """Greedy TDT decoder over the prediction network and joint of a Parakeet-TDT model.

    Holds its own copies of the (small) predictor and joint weights so it can run in a dtype and
    on a device of its choosing. ``encoder_projector`` is optional: it is only needed when
    ``prepare`` is given unprojected encoder output.
    """

    def __init__(
        self,
        embedding: nn.Embedding,
        lstm: nn.LSTM,
        pred_projector: nn.Linear,
        joint_head: nn.Linear,
        blank_id: int,
        durations: Sequence[int],
        max_symbols_per_frame: int = 10,
        encoder_projector: nn.Linear | None = None,
    ) -> None:
        super().__init__()
        if not lstm.batch_first:
            raise ValueError("the prediction LSTM must be batch_first")
        self.embedding = embedding
        self.lstm = lstm
        self.pred_projector = pred_projector
        self.joint_head = joint_head
        self.encoder_projector = encoder_projector
        self.blank_id = int(blank_id)
        self.durations = [int(d) for d in durations]
        self.num_labels = joint_head.out_features - len(self.durations)  # V + 1, blank included
        self.max_symbols_per_frame = int(max_symbols_per_frame)
        if not 0 <= self.blank_id < self.num_labels:
            raise ValueError(f"blank id {blank_id} outside the {self.num_labels} token logits")
        if self.max_symbols_per_frame < 1:
            raise ValueError("max_symbols_per_frame must be >= 1")

    @classmethod
    def from_model(
        cls,
        model: nn.Module,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
        max_symbols_per_frame: int | None = None,
    ) -> LabelLoopingDecoder:
        """Build from a transformers ``ParakeetForTDT`` (weights are copied)."""
        config = model.config
        if getattr(config, "hidden_act", "relu") != "relu":
            raise ValueError(f"joint activation {config.hidden_act!r} is not supported (relu only)")
        mods = [model.decoder.embedding, model.decoder.lstm, model.decoder.decoder_projector, model.joint.head,
                model.encoder_projector]
        embedding, lstm, pred_proj, head, enc_proj = (copy.deepcopy(m) for m in mods)
        decoder = cls(
            embedding,
            lstm,
            pred_proj,
            head,
            blank_id=config.blank_token_id,
            durations=list(config.durations),
            max_symbols_per_frame=max_symbols_per_frame or config.max_symbols_per_step or 10,
            encoder_projector=enc_proj,
        )
        decoder.eval().requires_grad_(False)
        reference = next(model.parameters())
        return decoder.to(device=device or reference.device, dtype=dtype or reference.dtype)

    # ------------------------------------------------------------------ allocation
    @property
    def joint_hidden(self) -> int:
        return self.joint_head.in_features

    @property
    def param_dtype(self) -> torch.dtype:
        return self.joint_head.weight.dtype

    @property
    def device(self) -> torch.device:
        return self.joint_head.weight.device

    @torch.inference_mode()
    def alloc(
        self,
        batch: int,
        max_frames: int,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
        max_tokens: int | None = None,
    ) -> DecoderState:
        """Preallocate a state for up to ``batch`` elements of up to ``max_frames`` frames."""
        device = torch.device(device) if device is not None else self.device
        dtype = dtype or self.param_dtype
        if device != self.device or dtype != self.param_dtype:
            raise ValueError(f"decoder weights are {self.param_dtype} on {self.device}; got {dtype} on {device}")
        capacity = int(max_tokens or max_frames * self.max_symbols_per_frame)
        layers, pred_hidden = self.lstm.num_layers, self.lstm.hidden_size
        H, B, T = self.joint_hidden, batch, max_frames

        def longs(*shape: int, fill: int = 0) -> torch.Tensor:
            return torch.full(shape, fill, dtype=torch.long, device=device)

        def bools(*shape: int) -> torch.Tensor:
            return torch.zeros(shape, dtype=torch.bool, device=device)

        def floats(*shape: int) -> torch.Tensor:
            return torch.zeros(shape, dtype=dtype, device=device)

        sos_h, sos_c, sos_pred = self._sos_state(device)
        return DecoderState(
            batch_size=B, max_frames=T, capacity=capacity,
            enc_proj=floats(B, T, H), lengths=longs(B), start=longs(B), last_frame=longs(B),
            time=longs(B), safe_time=longs(B), label_time=longs(B),
            h=floats(layers, B, pred_hidden), c=floats(layers, B, pred_hidden), pred_out=floats(B, H),
            labels=longs(B, fill=self.blank_id), scores=floats(B), dur_index=longs(B), durations=longs(B),
            enc_at=floats(B, H), hidden=floats(B, H), logits=floats(B, self.joint_head.out_features),
            flat_index=longs(B), new_labels=longs(B), new_scores=floats(B),
            active=bools(B), advance=bools(B), found=bools(B), is_blank=bools(B), emit=bools(B),
            last_emit_time=longs(B, fill=-1), symbols_on_frame=longs(B), last_label=longs(B, fill=self.blank_id),
            out_tokens=longs(B, capacity + 1), out_frames=longs(B, capacity + 1),
            out_durations=longs(B, capacity + 1), out_len=longs(B), write_pos=longs(B, 1),
            batch_index=torch.arange(B, dtype=torch.long, device=device),
            row_offset=torch.arange(B, dtype=torch.long, device=device) * T,
            duration_values=torch.tensor(self.durations, dtype=torch.long, device=device),
            sos_h=sos_h, sos_c=sos_c, sos_pred_out=sos_pred,
            outer_active=bools(), inner_active=bools(),
        )

    def _sos_state(self, device: torch.device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Predictor state and output after feeding <blank> (NeMo's SOS) from a zero state."""
        label = torch.full((1, 1), self.blank_id, dtype=torch.long, device=device)
        out, (h, c) = self.lstm(self.embedding(label))
        return h[:, 0].clone(), c[:, 0].clone(), self.pred_projector(out[:, 0])[0].clone()

    def initial_carry(self) -> DecoderCarry:
        """The carry of a stream that has not decoded anything yet."""
        with torch.inference_mode():
            h, c, pred = self._sos_state(self.device)
        blank = torch.tensor(self.blank_id, dtype=torch.long, device=self.device)
        return DecoderCarry(h, c, pred, blank, torch.zeros((), dtype=torch.long, device=self.device))

    # ------------------------------------------------------------------ inputs
    @torch.inference_mode()
    def prepare(
        self,
        state: DecoderState,
        enc: torch.Tensor,
        lengths: torch.Tensor | Sequence[int],
        carry: Sequence[DecoderCarry | None] | None = None,
        start_frames: torch.Tensor | Sequence[int] | None = None,
        projected: bool = True,
    ) -> None:
        """Load a batch into ``state`` in place and compute the loop flags.

        ``enc`` is ``[b, t, H]`` (projected; pass ``projected=False`` for raw encoder output, which
        is then projected here). Element ``i`` decodes frames ``start_frames[i] .. lengths[i]-1``,
        continuing from ``carry[i]`` when given (its ``time_jump`` is added to the start).
        """
        if not projected:
            if self.encoder_projector is None:
                raise ValueError("this decoder has no encoder projector; pass projected encoder output")
            enc = self.encoder_projector(enc.to(self.param_dtype))
        b, t = enc.shape[0], enc.shape[1]
        if b > state.batch_size or t > state.max_frames:
            raise ValueError(f"batch {b}x{t} exceeds the state's {state.batch_size}x{state.max_frames}")
        s = state
        s.enc_proj[:b, :t].copy_(enc)
        s.lengths[:b].copy_(torch.as_tensor(lengths), non_blocking=True)
        s.lengths[b:].zero_()
        if start_frames is None:
            s.start.zero_()
        else:
            s.start[:b].copy_(torch.as_tensor(start_frames), non_blocking=True)
            s.start[b:].zero_()
        torch.clamp(s.lengths - 1, min=0, out=s.last_frame)
        s.time.copy_(s.start)
        s.h.copy_(s.sos_h.unsqueeze(1).expand_as(s.h))
        s.c.copy_(s.sos_c.unsqueeze(1).expand_as(s.c))
        s.pred_out.copy_(s.sos_pred_out.unsqueeze(0).expand_as(s.pred_out))
        s.last_label.fill_(self.blank_id)
        for i, item in enumerate(carry or ()):
            if item is None:
                continue
            s.h[:, i].copy_(item.h)
            s.c[:, i].copy_(item.c)
            s.pred_out[i].copy_(item.pred_out)
            s.last_label[i].copy_(item.last_label)
            s.time[i].add_(item.time_jump)
        s.labels.fill_(self.blank_id)
        s.label_time.copy_(s.time)
        s.last_emit_time.fill_(-1)
        s.symbols_on_frame.zero_()
        s.out_len.zero_()
        s.found.zero_()
        s.advance.zero_()
        self._refresh_time(s)
        torch.any(s.active, out=s.outer_active)
        s.inner_active.zero_()

    # ------------------------------------------------------------------ loop bodies
    @torch.inference_mode()
    def outer_step(self, state: DecoderState) -> None:
        """Predictor step for the labels found last iteration, then the joint at current frames."""
        s = state
        # 1. one LSTM step for every element; keep the result only where a label was found
        out, (h, c) = self.lstm(self.embedding(s.labels).unsqueeze(1), (s.h, s.c))
        pred = self.pred_projector(out.squeeze(1))
        keep = s.found
        torch.where(keep.view(1, -1, 1), h, s.h, out=s.h)
        torch.where(keep.view(1, -1, 1), c, s.c, out=s.c)
        torch.where(keep.view(-1, 1), pred, s.pred_out, out=s.pred_out)
        # 2. after max_symbols labels on one frame, force one frame forward
        force = s.emit  # reuse scratch
        torch.ge(s.symbols_on_frame, self.max_symbols_per_frame, out=force)
        force.logical_and_(keep).logical_and_(s.active).logical_and_(torch.eq(s.last_emit_time, s.time))
        s.time.add_(force)
        s.found.zero_()
        self._refresh_time(s)
        # 3. joint at the current frame of every active element
        self._joint(s)
        s.labels.masked_fill_(s.active.logical_not(), self.blank_id)
        torch.eq(s.labels, self.blank_id, out=s.is_blank)
        self._force_blank_jump(s)
        s.label_time.copy_(s.time)
        s.durations.mul_(s.active)
        s.time.add_(s.durations)
        self._emit_and_advance(s, s.active)

    @torch.inference_mode()
    def inner_step(self, state: DecoderState) -> None:
        """Joint only, for elements whose label was blank: jump and look again."""
        s = state
        torch.where(s.advance, s.time, s.label_time, out=s.label_time)
        self._joint_into(s, s.advance)
        torch.eq(s.labels, self.blank_id, out=s.is_blank)
        self._force_blank_jump(s)
        s.durations.mul_(s.advance)
        s.time.add_(s.durations)
        self._emit_and_advance(s, s.advance)

    # ------------------------------------------------------------------ helpers (in place)
    def _emit_and_advance(self, s: DecoderState, looking: torch.Tensor) -> None:
        """Emit the non-blank labels of ``looking`` elements; blanks of active elements advance again."""
        torch.logical_and(looking, s.is_blank.logical_not(), out=s.emit)
        self._write(s)
        s.found.logical_or_(s.emit)
        self._refresh_time(s)
        torch.logical_and(s.active, s.is_blank, out=s.advance)
        self._refresh_flags(s)

    def _refresh_time(self, s: DecoderState) -> None:
        torch.minimum(s.time, s.last_frame, out=s.safe_time)
        torch.lt(s.time, s.lengths, out=s.active)

    def _refresh_flags(self, s: DecoderState) -> None:
        torch.any(s.advance, out=s.inner_active)
        torch.any(torch.logical_or(s.active, s.found), out=s.outer_active)

    def _logits(self, s: DecoderState) -> None:
        """``logits = head(relu(enc_proj[b, safe_time[b]] + pred_out[b]))`` into scratch buffers."""
        torch.add(s.row_offset, s.safe_time, out=s.flat_index)
        torch.index_select(s.enc_proj.view(-1, s.enc_proj.shape[-1]), 0, s.flat_index, out=s.enc_at)
        torch.add(s.enc_at, s.pred_out, out=s.hidden)
        s.hidden.relu_()
        torch.addmm(self.joint_head.bias, s.hidden, self.joint_head.weight.t(), out=s.logits)

    def _joint(self, s: DecoderState) -> None:
        """Labels, scores and jump indices for every element."""
        self._logits(s)
        torch.max(s.logits[:, : self.num_labels], dim=-1, out=(s.scores, s.labels))
        torch.argmax(s.logits[:, self.num_labels :], dim=-1, out=s.dur_index)
        torch.index_select(s.duration_values, 0, s.dur_index, out=s.durations)

    def _joint_into(self, s: DecoderState, mask: torch.Tensor) -> None:
        """Like :meth:`_joint` but only elements in ``mask`` take the new label and score."""
        self._logits(s)
        torch.max(s.logits[:, : self.num_labels], dim=-1, out=(s.new_scores, s.new_labels))
        torch.where(mask, s.new_labels, s.labels, out=s.labels)
        torch.where(mask, s.new_scores, s.scores, out=s.scores)
        torch.argmax(s.logits[:, self.num_labels :], dim=-1, out=s.dur_index)
        torch.index_select(s.duration_values, 0, s.dur_index, out=s.durations)

    def _force_blank_jump(self, s: DecoderState) -> None:
        """A blank with duration 0 jumps one frame."""
        s.durations.add_(torch.logical_and(s.is_blank, s.durations == 0))

    def _write(self, s: DecoderState) -> None:
        """Append the current label of every element in ``s.emit`` at its write cursor."""
        torch.clamp(s.out_len, max=s.capacity, out=s.write_pos[:, 0])
        s.out_tokens.scatter_(1, s.write_pos, s.labels.unsqueeze(1))
        s.out_frames.scatter_(1, s.write_pos, s.label_time.unsqueeze(1))
        s.out_durations.scatter_(1, s.write_pos, s.durations.unsqueeze(1))
        same_frame = torch.logical_and(s.emit, s.last_emit_time == s.label_time)
        counted = torch.where(same_frame, s.symbols_on_frame, 0) + 1
        torch.where(s.emit, counted, s.symbols_on_frame, out=s.symbols_on_frame)
        torch.where(s.emit, s.label_time, s.last_emit_time, out=s.last_emit_time)
        torch.where(s.emit, s.labels, s.last_label, out=s.last_label)
        s.out_len.add_(s.emit)

    # ------------------------------------------------------------------ driving and results
    def run(self, state: DecoderState) -> None:
        """The plain loop with host checks (the GPU path replaces the checks by WHILE nodes)."""
        while bool(state.outer_active):
            self.outer_step(state)
            while bool(state.inner_active):
                self.inner_step(state)

    @torch.inference_mode()
    def collect(self, state: DecoderState, batch: int | None = None) -> list[DecodedSeq]:
        """Copy the first ``batch`` elements' tokens to the host (frames relative to each start)."""
        b = state.batch_size if batch is None else batch
        lengths = state.out_len[:b].clamp(max=state.capacity).tolist()
        width = max(lengths, default=0)
        tokens = state.out_tokens[:b, :width].tolist()
        frames = (state.out_frames[:b, :width] - state.start[:b, None]).tolist()
        durations = state.out_durations[:b, :width].tolist()
        return [DecodedSeq(tokens[i][:n], frames[i][:n], durations[i][:n]) for i, n in enumerate(lengths)]

    @torch.inference_mode()
    def carry_out(self, state: DecoderState, batch: int | None = None) -> list[DecoderCarry]:
        """Per-element carries after the loop (no host sync)."""
        b = state.batch_size if batch is None else batch
        jump = torch.clamp(state.time[:b] - state.lengths[:b], min=0)
        return [
            DecoderCarry(
                h=state.h[:, i].clone(), c=state.c[:, i].clone(), pred_out=state.pred_out[i].clone(),
                last_label=state.last_label[i].clone(), time_jump=jump[i].clone(),
            )
            for i in range(b)
        ]

    def decode(
        self,
        enc: torch.Tensor,
        lengths: torch.Tensor | Sequence[int],
        carry: Sequence[DecoderCarry | None] | None = None,
        start_frames: torch.Tensor | Sequence[int] | None = None,
        projected: bool = True,
        state: DecoderState | None = None,
    ) -> tuple[list[DecodedSeq], list[DecoderCarry]]:
        """Allocate (or reuse ``state``), prepare, loop, collect: the whole decode in one call."""
        b, t = enc.shape[0], enc.shape[1]
        if state is None or state.batch_size < b or state.max_frames < t:
            state = self.alloc(b, t)
        self.prepare(state, enc, lengths, carry=carry, start_frames=start_frames, projected=projected)
        self.run(state)
        return self.collect(state, b), self.carry_out(state, b)
