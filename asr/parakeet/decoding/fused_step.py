"""The label-looping decoder's two loop bodies as a few fused kernels (Triton) around cuBLAS GEMMs.

The torch step bodies of :class:`asr.parakeet.decoding.label_looping.LabelLoopingDecoder` launch ~50 small kernels
per step; inside a CUDA graph each still costs ~2 us of dependent latency, so at batch 128 the
decoder took ~93 us per step. Here a step is:

* outer (one predictor step, then the joint): per LSTM layer one GEMM + one cell kernel (layer 0's
  input GEMM is a table lookup: ``embedding @ W_ih0^T + biases`` is precomputed per label), the
  projection GEMM, one ``prep`` kernel (masked predictor update, max-symbols forcing, joint hidden),
  the joint GEMM and one ``post`` kernel (both argmaxes and all bookkeeping);
* inner (blank skipping): the joint GEMM and one ``post`` kernel.

Each ``post``/``prep``/cell kernel is one program per batch row, so rows never synchronise and the
loop conditions are the per-row bytes ``alive`` (outer) and ``advance`` (inner): the WHILE node's
condition kernel reduces them (``LoopSpec`` takes a vector flag).

Semantics are the torch bodies' exactly; rounding differs only in the predictor (the LSTM cell is
computed in fp32 from bf16 gates instead of cuDNN's kernel), so bf16 tokens can differ from the
torch bodies where two logits are within rounding of each other. The joint GEMM is the same
``addmm`` call as the torch bodies, and argmax ties resolve to the first index as in ``torch.max``.
Runs on CPU tensors under ``TRITON_INTERPRET=1`` (how CI tests it).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from asr.parakeet.decoding.label_looping import DecoderState, LabelLoopingDecoder

try:  # Triton ships with CUDA builds of torch; the CPU wheel has none.
    import triton
    import triton.language as tl
except ImportError as exc:  # pragma: no cover - depends on the install
    triton = None
    tl = None
    _TRITON_ERROR: ImportError | None = exc
else:
    _TRITON_ERROR = None


def available() -> bool:
    """Whether Triton is importable (the fused step needs it)."""
    return triton is not None


def supports(decoder: LabelLoopingDecoder) -> bool:
    """Whether the fused step handles this decoder's predictor (a plain LSTM with biases)."""
    lstm = getattr(decoder, "lstm", None)
    if not isinstance(lstm, torch.nn.LSTM):
        return False
    return not lstm.proj_size and bool(lstm.bias) and not lstm.bidirectional


def _require_triton() -> None:
    if triton is None:
        raise ImportError(
            "the fused decoder step needs Triton (it comes with CUDA builds of torch: "
            "pip install 'cadence[gpu]')"
        ) from _TRITON_ERROR


if triton is not None:

    @triton.jit
    def _sigmoid(x):
        return 1.0 / (1.0 + tl.exp(-x))

    @triton.jit
    def _tanh(x):
        return 2.0 / (1.0 + tl.exp(-2.0 * x)) - 1.0

    @triton.jit
    def _row_mask(mask, offs, flag):
        """``mask & flag`` for a scalar ``flag``, broadcast explicitly (Triton's interpreter needs it)."""
        return mask & ((offs * 0 + flag.to(tl.int32)) != 0)

    @triton.jit
    def _lstm_cell_kernel(
        gates_ptr, table_ptr, labels_ptr, c_ptr, h_ptr, found_ptr, out_ptr, out_stride,
        next_h_ptr, next_dst_ptr, next_dst_stride,
        P: tl.constexpr, BLOCK: tl.constexpr, USE_TABLE: tl.constexpr, HAS_NEXT: tl.constexpr,
    ):
        """One row of an LSTM cell: gates (+ table row) -> c, h; state updated where ``found``.

        The new h always goes to ``out`` (the next layer's GEMM input, or the projection's); for a
        next layer, its current h row is copied beside it so one GEMM takes ``[h_below | h_own]``.
        """
        row = tl.program_id(0).to(tl.int64)
        offs = tl.arange(0, BLOCK)
        mask = offs < P
        g = gates_ptr + row * (4 * P)
        gi = tl.load(g + offs, mask=mask, other=0.0).to(tl.float32)
        gf = tl.load(g + P + offs, mask=mask, other=0.0).to(tl.float32)
        gg = tl.load(g + 2 * P + offs, mask=mask, other=0.0).to(tl.float32)
        go = tl.load(g + 3 * P + offs, mask=mask, other=0.0).to(tl.float32)
        if USE_TABLE:
            label = tl.load(labels_ptr + row)
            t = table_ptr + label * (4 * P)
            gi += tl.load(t + offs, mask=mask, other=0.0).to(tl.float32)
            gf += tl.load(t + P + offs, mask=mask, other=0.0).to(tl.float32)
            gg += tl.load(t + 2 * P + offs, mask=mask, other=0.0).to(tl.float32)
            go += tl.load(t + 3 * P + offs, mask=mask, other=0.0).to(tl.float32)
        c_old = tl.load(c_ptr + row * P + offs, mask=mask, other=0.0).to(tl.float32)
        c_new = _sigmoid(gf) * c_old + _sigmoid(gi) * _tanh(gg)
        h_new = _sigmoid(go) * _tanh(c_new)
        tl.store(out_ptr + row * out_stride + offs, h_new, mask=mask)
        if HAS_NEXT:
            own = tl.load(next_h_ptr + row * P + offs, mask=mask, other=0.0)
            tl.store(next_dst_ptr + row * next_dst_stride + offs, own, mask=mask)
        keep = _row_mask(mask, offs, tl.load(found_ptr + row) != 0)
        tl.store(c_ptr + row * P + offs, c_new, mask=keep)
        tl.store(h_ptr + row * P + offs, h_new, mask=keep)

    @triton.jit
    def _joint_hidden_row(enc_ptr, row, safe_time, T, pred_ptr, hidden_ptr, H: tl.constexpr, BLOCK_H: tl.constexpr):
        """``hidden[row] = relu(enc_proj[row, safe_time] + pred_out[row])`` rounded like torch's add."""
        offs = tl.arange(0, BLOCK_H)
        mask = offs < H
        enc = tl.load(enc_ptr + (row * T + safe_time) * H + offs, mask=mask, other=0.0)
        pred = tl.load(pred_ptr + row * H + offs, mask=mask, other=0.0)
        total = (enc.to(tl.float32) + pred.to(tl.float32)).to(enc.dtype)  # torch.add rounds to the dtype
        tl.store(hidden_ptr + row * H + offs, tl.maximum(total, 0.0), mask=mask)

    @triton.jit
    def _prep_kernel(
        proj_ptr, pred_ptr, found_ptr, active_ptr, time_ptr, safe_time_ptr, lengths_ptr, last_frame_ptr,
        symbols_ptr, last_emit_ptr, enc_ptr, hidden_ptr, T, max_symbols,
        H: tl.constexpr, BLOCK_H: tl.constexpr,
    ):
        """Outer step, after the predictor: keep its output where a label was found, force a frame
        forward after ``max_symbols`` labels on one frame, refresh time, build the joint hidden."""
        row = tl.program_id(0).to(tl.int64)
        offs = tl.arange(0, BLOCK_H)
        mask = offs < H
        keep = tl.load(found_ptr + row) != 0
        proj = tl.load(proj_ptr + row * H + offs, mask=mask, other=0.0)
        tl.store(pred_ptr + row * H + offs, proj, mask=_row_mask(mask, offs, keep))
        time = tl.load(time_ptr + row)
        active = tl.load(active_ptr + row) != 0
        symbols = tl.load(symbols_ptr + row)
        last_emit = tl.load(last_emit_ptr + row)
        force = (symbols >= max_symbols) & keep & active & (last_emit == time)
        time = time + force.to(time.dtype)
        length = tl.load(lengths_ptr + row)
        safe_time = tl.minimum(time, tl.load(last_frame_ptr + row))
        tl.store(time_ptr + row, time)
        tl.store(safe_time_ptr + row, safe_time)
        tl.store(active_ptr + row, (time < length).to(tl.uint8))
        tl.store(found_ptr + row, tl.where(keep, 0, 0).to(tl.uint8))
        _joint_hidden_row(enc_ptr, row, safe_time, T, pred_ptr, hidden_ptr, H, BLOCK_H)

    @triton.jit
    def _post_kernel(
        logits_ptr, logits_stride, duration_values_ptr,
        time_ptr, safe_time_ptr, lengths_ptr, last_frame_ptr, labels_ptr, scores_ptr, dur_index_ptr,
        durations_ptr, label_time_ptr, active_ptr, advance_ptr, found_ptr, alive_ptr,
        last_emit_ptr, symbols_ptr, last_label_ptr, out_len_ptr,
        out_tokens_ptr, out_frames_ptr, out_durations_ptr, out_stride, capacity,
        enc_ptr, pred_ptr, hidden_ptr, T, blank,
        NUM_LABELS: tl.constexpr, D: tl.constexpr, BLOCK_V: tl.constexpr, BLOCK_D: tl.constexpr,
        H: tl.constexpr, BLOCK_H: tl.constexpr, OUTER: tl.constexpr,
    ):
        """Both argmaxes of one row's logits, then the step's bookkeeping (see the torch bodies)."""
        row = tl.program_id(0).to(tl.int64)
        logits = logits_ptr + row * logits_stride
        offs = tl.arange(0, BLOCK_V)
        first = tl.load(logits + offs, mask=offs < NUM_LABELS, other=float("-inf")).to(tl.float32)
        best = tl.max(first, 0)
        best_i = tl.argmax(first, 0).to(tl.int64)
        for start in range(BLOCK_V, NUM_LABELS, BLOCK_V):
            idx = start + offs
            x = tl.load(logits + idx, mask=idx < NUM_LABELS, other=float("-inf")).to(tl.float32)
            chunk_max = tl.max(x, 0)
            chunk_arg = tl.argmax(x, 0).to(tl.int64) + start
            better = chunk_max > best  # strict: the first index wins ties, as in torch.max
            best_i = tl.where(better, chunk_arg, best_i)
            best = tl.where(better, chunk_max, best)
        d_offs = tl.arange(0, BLOCK_D)
        d_logits = tl.load(logits + NUM_LABELS + d_offs, mask=d_offs < D, other=float("-inf")).to(tl.float32)
        dur_index = tl.argmax(d_logits, 0).to(tl.int64)
        dur = tl.load(duration_values_ptr + dur_index)

        time = tl.load(time_ptr + row)
        length = tl.load(lengths_ptr + row)
        if OUTER:
            active = time < length  # refreshed by prep
            label = tl.where(active, best_i, blank)
            score = best
            label_time = time
            moving = active
        else:
            moving = tl.load(advance_ptr + row) != 0
            label_time = tl.where(moving, time, tl.load(label_time_ptr + row))
            label = tl.where(moving, best_i, tl.load(labels_ptr + row))
            score = tl.where(moving, best, tl.load(scores_ptr + row).to(tl.float32))
        is_blank = label == blank
        dur = dur + (is_blank & (dur == 0)).to(dur.dtype)
        dur = tl.where(moving, dur, 0)
        time = time + dur
        emit = moving & (label != blank)

        out_len = tl.load(out_len_ptr + row)
        pos = row * out_stride + tl.minimum(out_len, capacity)
        tl.store(out_tokens_ptr + pos, label, mask=emit)
        tl.store(out_frames_ptr + pos, label_time, mask=emit)
        tl.store(out_durations_ptr + pos, dur, mask=emit)
        last_emit = tl.load(last_emit_ptr + row)
        symbols = tl.load(symbols_ptr + row)
        counted = tl.where(last_emit == label_time, symbols, 0) + 1
        tl.store(symbols_ptr + row, tl.where(emit, counted, symbols))
        tl.store(last_emit_ptr + row, tl.where(emit, label_time, last_emit))
        tl.store(last_label_ptr + row, tl.where(emit, label, tl.load(last_label_ptr + row)))
        tl.store(out_len_ptr + row, out_len + emit.to(out_len.dtype))

        found = emit | (tl.load(found_ptr + row) != 0)
        active = time < length
        advance = active & is_blank
        safe_time = tl.minimum(time, tl.load(last_frame_ptr + row))
        tl.store(labels_ptr + row, label)
        tl.store(scores_ptr + row, score)
        tl.store(dur_index_ptr + row, dur_index)
        tl.store(durations_ptr + row, dur)
        tl.store(label_time_ptr + row, label_time)
        tl.store(time_ptr + row, time)
        tl.store(safe_time_ptr + row, safe_time)
        tl.store(active_ptr + row, active.to(tl.uint8))
        tl.store(advance_ptr + row, advance.to(tl.uint8))
        tl.store(found_ptr + row, found.to(tl.uint8))
        tl.store(alive_ptr + row, (active | found).to(tl.uint8))
        if advance:
            _joint_hidden_row(enc_ptr, row, safe_time, T, pred_ptr, hidden_ptr, H, BLOCK_H)


def _input_table(decoder: LabelLoopingDecoder) -> torch.Tensor:
    """``embedding @ W_ih0^T + b_ih0 + b_hh0`` per label (fp32 math), cached on the decoder."""
    table = getattr(decoder, "_fused_input_table", None)
    if table is None:
        lstm = decoder.lstm
        bias0 = (lstm.bias_ih_l0 + lstm.bias_hh_l0).float()
        table = decoder.embedding.weight.float() @ lstm.weight_ih_l0.float().t() + bias0
        table = table.to(decoder.param_dtype).contiguous()
        decoder._fused_input_table = table  # shared by every state/graph of this decoder
    return table


def _pow2(n: int) -> int:
    return 1 << max(0, (int(n) - 1).bit_length())


@dataclass
class _Layer:
    """One LSTM layer's GEMM operands: ``gates = x @ weight_t (+ bias)`` with ``x`` its input buffer."""

    x: torch.Tensor  # [B, K]: h of the state (layer 0) or [h_below_new | h_own] (later layers)
    weight_t: torch.Tensor  # [K, 4P]
    bias: torch.Tensor | None  # [4P] (later layers; layer 0's biases are in the table)
    gates: torch.Tensor  # [B, 4P]


class FusedSteps:
    """``outer()`` / ``inner()`` over a :class:`DecoderState`, for the WHILE-node loop.

    Loop flags are the vectors :attr:`alive` (outer) and ``state.advance`` (inner); ``prepare``
    of the decoder must be followed by :meth:`reset_flags` before the loop runs.
    """

    def __init__(self, decoder: LabelLoopingDecoder, state: DecoderState) -> None:
        _require_triton()
        lstm = decoder.lstm
        if not supports(decoder):
            raise ValueError("the fused step supports a plain unidirectional LSTM with biases")
        self.decoder, self.state = decoder, state
        s, B = state, state.batch_size
        P, L = lstm.hidden_size, lstm.num_layers
        dtype, device = decoder.param_dtype, decoder.device
        self.P, self.H = P, decoder.joint_hidden
        with torch.inference_mode():
            self.table = _input_table(decoder)
            layers = [_Layer(s.h[0], lstm.weight_hh_l0.t(), None, torch.empty(B, 4 * P, dtype=dtype, device=device))]
            for i in range(1, L):
                w = torch.cat([getattr(lstm, f"weight_ih_l{i}"), getattr(lstm, f"weight_hh_l{i}")], dim=1)
                bias = getattr(lstm, f"bias_ih_l{i}") + getattr(lstm, f"bias_hh_l{i}")
                x = torch.empty(B, 2 * P, dtype=dtype, device=device)
                layers.append(_Layer(x, w.t().contiguous(), bias.contiguous(),
                                     torch.empty(B, 4 * P, dtype=dtype, device=device)))
        self.layers = layers
        self.top = torch.empty(B, P, dtype=dtype, device=device)  # last layer's new h
        self.proj = torch.empty(B, self.H, dtype=dtype, device=device)
        self.alive = torch.zeros(B, dtype=torch.uint8, device=device)
        self._u8 = {name: getattr(s, name).view(torch.uint8) for name in ("active", "advance", "found")}
        self.advance_flag = self._u8["advance"]
        self.num_labels = decoder.num_labels
        self.num_durations = len(decoder.durations)
        self.block_v = min(_pow2(self.num_labels), 2048)
        self.block_h = _pow2(self.H)
        self.block_p = _pow2(P)

    def reset_flags(self) -> None:
        """After ``decoder.prepare``: the outer loop runs while any row is active."""
        self.alive.copy_(self.state.active)

    # ------------------------------------------------------------------ bodies
    def outer(self) -> None:
        s, grid = self.state, (self.state.batch_size,)
        found = self._u8["found"]
        for i, layer in enumerate(self.layers):
            if layer.bias is None:
                torch.mm(layer.x, layer.weight_t, out=layer.gates)
            else:
                torch.addmm(layer.bias, layer.x, layer.weight_t, out=layer.gates)
            nxt = self.layers[i + 1] if i + 1 < len(self.layers) else None
            out = nxt.x if nxt is not None else self.top
            _lstm_cell_kernel[grid](
                layer.gates, self.table, s.labels, s.c[i], s.h[i], found, out, out.stride(0),
                s.h[i + 1] if nxt is not None else s.h[i], out[:, self.P:] if nxt is not None else out,
                out.stride(0),
                P=self.P, BLOCK=self.block_p, USE_TABLE=i == 0, HAS_NEXT=nxt is not None,
            )
        head = self.decoder.pred_projector
        torch.addmm(head.bias, self.top, head.weight.t(), out=self.proj)
        _prep_kernel[grid](
            self.proj, s.pred_out, found, self._u8["active"], s.time, s.safe_time, s.lengths, s.last_frame,
            s.symbols_on_frame, s.last_emit_time, s.enc_proj, s.hidden, s.max_frames,
            self.decoder.max_symbols_per_frame, H=self.H, BLOCK_H=self.block_h,
        )
        self._joint_and_post(outer=True)

    def inner(self) -> None:
        self._joint_and_post(outer=False)

    def _joint_and_post(self, outer: bool) -> None:
        s, joint = self.state, self.decoder.joint_head
        torch.addmm(joint.bias, s.hidden, joint.weight.t(), out=s.logits)
        _post_kernel[(s.batch_size,)](
            s.logits, s.logits.stride(0), s.duration_values,
            s.time, s.safe_time, s.lengths, s.last_frame, s.labels, s.scores, s.dur_index,
            s.durations, s.label_time, self._u8["active"], self._u8["advance"], self._u8["found"], self.alive,
            s.last_emit_time, s.symbols_on_frame, s.last_label, s.out_len,
            s.out_tokens, s.out_frames, s.out_durations, s.out_tokens.stride(0), s.capacity,
            s.enc_proj, s.pred_out, s.hidden, s.max_frames, self.decoder.blank_id,
            NUM_LABELS=self.num_labels, D=self.num_durations, BLOCK_V=self.block_v,
            BLOCK_D=_pow2(self.num_durations), H=self.H, BLOCK_H=self.block_h, OUTER=outer,
        )
