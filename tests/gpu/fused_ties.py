"""Why the fused bf16 decoder steps part from the torch step bodies: replay every step from one state.

The plain loop (torch bodies) runs as the reference; before each of its steps the fused body runs
on a copy of the very same state, so any difference in that step's logits is the bodies' own
rounding, not an earlier divergence. What this shows (``check``):

* blank-skipping (inner) steps: the fused logits equal the torch logits bit for bit: the joint
  (same ``addmm``), its input (``enc + pred`` rounded like ``torch.add``) and both argmaxes (first
  index on ties, as ``torch.max``) are not the cause;
* predictor (outer) steps: the logits differ by a few bf16 steps (the LSTM cell in fp32 from bf16
  gates and layer 0's input GEMM as a per-label table, against the torch LSTM's bf16 math): the cause;
* every row where the full fused decode parts from the torch decode parts at a step where the
  fused body, from the torch body's own state, (nearly) chose otherwise: a near tie within that
  step's rounding (``asr.parakeet.margins.judge``), not state carried wrongly between steps;
* the fused decode is deterministic (two runs agree: no race between rows).

On a CPU the kernels run under ``TRITON_INTERPRET=1``, whose bf16 is not a GPU's (it truncates
fp32 -> bf16 and compares bf16 bit patterns: ``interpreter_rounds_bf16_like_a_gpu``), so in bf16 the
CPU replays :class:`FusedNumericsLSTM`, the fused cell's arithmetic in torch (``emulate``); the
kernels themselves are replayed in bf16 on CUDA (``tests/gpu/test_fused_ties.py``).

``python -m tests.gpu.fused_ties [device] [dtype] [emulate] [batch=N] [frames=N]`` prints one JSON line.
"""

from __future__ import annotations

import dataclasses
import json
import sys

import torch

from asr.parakeet.decoding.fused_step import FusedSteps
from asr.parakeet.decoding.graph_decoder import GraphDecoder
from asr.parakeet.decoding.label_looping import DecoderState, LabelLoopingDecoder
from asr.parakeet.margins import Decision, judge
from asr.parakeet.tiny import tiny_tdt


def _copy_state(dst: DecoderState, src: DecoderState) -> None:
    for field in dataclasses.fields(DecoderState):
        value = getattr(src, field.name)
        if isinstance(value, torch.Tensor):
            getattr(dst, field.name).copy_(value)


def _fused_hidden(s: DecoderState) -> None:
    """What the fused ``post`` leaves for the next blank-skipping step: relu(enc + pred) at safe_time."""
    torch.add(s.row_offset, s.safe_time, out=s.flat_index)
    enc_at = s.enc_proj.view(-1, s.enc_proj.shape[-1]).index_select(0, s.flat_index)
    torch.add(enc_at, s.pred_out, out=s.hidden)
    s.hidden.relu_()


def _margin(logits: torch.Tensor, choice: torch.Tensor) -> torch.Tensor:
    """Chosen minus best other, per row (negative where another index is larger)."""
    logits = logits.float()
    picked = logits.gather(1, choice[:, None])[:, 0]
    return picked - logits.scatter(1, choice[:, None], float("-inf")).max(dim=1).values


def _top2(logits: torch.Tensor) -> torch.Tensor:
    top = logits.float().topk(2, dim=1).values
    return top[:, 0] - top[:, 1]


class FusedNumericsLSTM(torch.nn.Module):
    """The fused cell's arithmetic in torch, for one step (what ``FusedSteps.outer`` computes on the GPU):
    layer 0 takes its input GEMM from the per-label table (fp32 math, rounded once), each later
    layer one ``addmm`` over ``[h_below | h_own]`` with the two biases summed in the weight dtype; every
    cell runs in fp32 from the rounded gates (Triton's sigmoid/tanh formulas); h and c are stored
    rounded. Lets a CPU show the cause without Triton (whose interpreter rounds bf16 wrongly)."""

    def __init__(self, lstm: torch.nn.LSTM) -> None:
        super().__init__()
        self.lstm = lstm

    def forward(self, x: torch.Tensor, state: tuple[torch.Tensor, torch.Tensor]):
        lstm, (h, c) = self.lstm, state
        dtype, P = x.dtype, lstm.hidden_size
        below = None
        hs, cs = [], []
        for i in range(lstm.num_layers):
            w_ih, w_hh = getattr(lstm, f"weight_ih_l{i}"), getattr(lstm, f"weight_hh_l{i}")
            b_ih, b_hh = getattr(lstm, f"bias_ih_l{i}"), getattr(lstm, f"bias_hh_l{i}")
            if i == 0:
                table = (x[:, 0].float() @ w_ih.float().t() + (b_ih + b_hh).float()).to(dtype)
                gates = torch.mm(h[0], w_hh.t()).float() + table.float()
            else:
                both = torch.cat([below, h[i]], dim=1)
                gates = torch.addmm(b_ih + b_hh, both, torch.cat([w_ih, w_hh], dim=1).t()).float()
            gi, gf, gg, go = gates.split(P, dim=1)
            sig = lambda v: 1.0 / (1.0 + torch.exp(-v))  # noqa: E731 - Triton's formulas
            tanh = lambda v: 2.0 / (1.0 + torch.exp(-2.0 * v)) - 1.0  # noqa: E731
            c_new = sig(gf) * c[i].float() + sig(gi) * tanh(gg)
            h_new = sig(go) * tanh(c_new)
            below = h_new.to(dtype)
            hs.append(below)
            cs.append(c_new.to(dtype))
        return below.unsqueeze(1), (torch.stack(hs), torch.stack(cs))


class _Emulated:
    """``outer``/``inner`` over a state with the torch bodies, the LSTM swapped for the fused arithmetic."""

    def __init__(self, decoder: LabelLoopingDecoder, state: DecoderState) -> None:
        self.decoder, self.state, self.cell = decoder, state, FusedNumericsLSTM(decoder.lstm)

    def reset_flags(self) -> None:
        pass

    def outer(self) -> None:
        d = self.decoder
        real, d.lstm = d.lstm, self.cell
        try:
            d.outer_step(self.state)
        finally:
            d.lstm = real

    def inner(self) -> None:
        self.decoder.inner_step(self.state)


def replay(decoder: LabelLoopingDecoder, enc: torch.Tensor, lengths: list[int],
           emulate: bool = False) -> dict[str, object]:
    """Reference plain loop, with the fused body replayed from the reference state before each step
    (``emulate``: the torch bodies with :class:`FusedNumericsLSTM` instead of the Triton kernels)."""
    b, t = enc.shape[0], enc.shape[1]
    ref, mirror = decoder.alloc(b, t), decoder.alloc(b, t)
    fused = _Emulated(decoder, mirror) if emulate else FusedSteps(decoder, mirror)
    decoder.prepare(ref, enc, lengths)
    n = decoder.num_labels
    decisions: list[list[Decision]] = [[] for _ in range(b)]
    forced: list[list[float]] = [[] for _ in range(b)]
    inner_max = outer_max = pred_max = 0.0
    flips = 0

    def step(outer: bool) -> None:
        nonlocal inner_max, outer_max, pred_max, flips
        _copy_state(mirror, ref)
        if outer:
            deciding = None  # known after the step: rows active once time is refreshed
            fused.reset_flags()
            fused.outer()
            decoder.outer_step(ref)
        else:
            deciding = ref.advance.clone()
            if not emulate:
                _fused_hidden(mirror)
            fused.inner()
            decoder.inner_step(ref)
        if deciding is None:
            deciding = ref.label_time < ref.lengths  # active at the decision (label_time = decision frame)
        rows = deciding.nonzero().flatten()
        if rows.numel() == 0:
            return
        diff = (mirror.logits[rows].float() - ref.logits[rows].float()).abs()
        if outer:
            outer_max = max(outer_max, float(diff.max()))
            pred_max = max(pred_max, float((mirror.pred_out[rows].float() - ref.pred_out[rows].float()).abs().max()))
        else:
            inner_max = max(inner_max, float(diff.max()))
        label = ref.logits[rows, :n].float().argmax(1)
        jump = ref.logits[rows, n:].float().argmax(1)
        ref_margin = torch.minimum(_top2(ref.logits[rows, :n]), _top2(ref.logits[rows, n:]))
        fused_margin = torch.minimum(_margin(mirror.logits[rows, :n], label), _margin(mirror.logits[rows, n:], jump))
        changed = fused_margin < 0  # the fused body, from the same state, would have chosen otherwise
        flips += int(changed.sum())
        frames = ref.label_time[rows].tolist()
        emitted = (ref.out_len[rows] - ref.emit[rows].long()).tolist()
        for k, r in enumerate(rows.tolist()):
            decisions[r].append(Decision(frames[k], emitted[k], int(label[k]), int(jump[k]),
                                         float(ref_margin[k]), float("inf"), 0.0))
            forced[r].append(float(fused_margin[k]))

    with torch.inference_mode():
        while bool(ref.outer_active):
            step(outer=True)
            while bool(ref.inner_active):
                step(outer=False)
    return {"reference": decoder.collect(ref, b), "decisions": decisions, "forced": forced,
            "inner_logit_max_diff": inner_max, "outer_logit_max_diff": outer_max, "pred_max_diff": pred_max,
            "flips": flips}


def _tiny_decoder(device: str, dtype: torch.dtype) -> LabelLoopingDecoder:
    model = tiny_tdt(seed=5).to(device)
    with torch.no_grad():
        model.joint.head.bias[model.config.blank_token_id] += 0.08  # blanks mixed in (as fused_parity)
    return LabelLoopingDecoder.from_model(model, device=device, dtype=dtype)


def check(device: str = "cpu", dtype: str = "bfloat16", batch: int = 8, frames: int = 40,
          emulate: bool = False, decoder: LabelLoopingDecoder | None = None,
          enc: torch.Tensor | None = None, lengths: list[int] | None = None) -> dict[str, object]:
    """Replay, then the full decode (fused, or emulated) twice; one JSON-able summary.

    Default inputs: the tiny random model (small margins: many near ties) on random encoder output.
    """
    torch_dtype = getattr(torch, dtype)
    if decoder is None:
        decoder = _tiny_decoder(device, torch_dtype)
    if enc is None:
        gen = torch.Generator().manual_seed(0)
        enc = torch.randn(batch, frames, decoder.joint_hidden, generator=gen).to(device, torch_dtype)
        lengths = [frames - (7 * i) % (frames // 2) for i in range(batch)]  # mixed lengths, none tiny
    assert lengths is not None
    r = replay(decoder, enc, lengths, emulate=emulate)
    if emulate:
        state = decoder.alloc(enc.shape[0], enc.shape[1])
        real, decoder.lstm = decoder.lstm, FusedNumericsLSTM(decoder.lstm)
        try:
            got, _ = decoder.decode(enc, lengths, state=state)
            again, _ = decoder.decode(enc, lengths, state=state)
        finally:
            decoder.lstm = real
    else:
        graph = GraphDecoder(decoder, mode="eager" if device == "cpu" else "auto", step="fused")
        got, _ = graph.decode(enc, lengths)
        again, _ = graph.decode(enc, lengths)
    # The full fused decode carries its own (rounded) LSTM state, which drifts from the torch one by a
    # few roundings; the slack allows for that drift: twice the largest one-step logit difference.
    verdict = judge(r["reference"], r["decisions"], r["forced"], got, slack=2.0 * float(r["outer_logit_max_diff"]))
    return {
        "device": device, "dtype": dtype, "emulated": emulate, "batch": enc.shape[0],
        "steps": sum(len(d) for d in r["decisions"]), "tokens": sum(len(s.tokens) for s in r["reference"]),
        "inner_logit_max_diff": r["inner_logit_max_diff"], "outer_logit_max_diff": r["outer_logit_max_diff"],
        "pred_max_diff": r["pred_max_diff"], "step_flips": r["flips"],
        "deterministic": [g.tokens for g in got] == [a.tokens for a in again],
        "near_tie_margin_min": min((d.label_margin for row in r["decisions"] for d in row), default=None),
        **verdict.as_dict(),
    }


def interpreter_rounds_bf16_like_a_gpu() -> bool:
    """Whether Triton's interpreter rounds fp32 -> bf16 to nearest and compares bf16 by value (3.x: no;
    it truncates, and ``tl.maximum(x_bf16, 0.0)`` returns negative x unchanged)."""
    import triton
    import triton.language as tl

    @triton.jit
    def _probe(x_ptr, y_ptr, out_ptr, relu_ptr, N: tl.constexpr):
        offs = tl.arange(0, N)
        tl.store(out_ptr + offs, tl.load(x_ptr + offs).to(tl.bfloat16))
        tl.store(relu_ptr + offs, tl.maximum(tl.load(y_ptr + offs), 0.0))

    x = torch.tensor([1.0 + 2.0**-8 + 2.0**-10, -0.3], dtype=torch.float32)
    y = torch.tensor([-1.5, 2.0], dtype=torch.bfloat16)
    out, relu = torch.empty(2, dtype=torch.bfloat16), torch.empty(2, dtype=torch.bfloat16)
    _probe[(1,)](x, y, out, relu, N=2)
    return torch.equal(out, x.to(torch.bfloat16)) and torch.equal(relu, y.relu())


if __name__ == "__main__":
    args = sys.argv[1:]
    device = args[0] if args else "cpu"
    dtype = args[1] if len(args) > 1 else "bfloat16"
    emulate = "emulate" in args[2:]
    sizes = {k: int(v) for k, _, v in (a.partition("=") for a in args[2:] if a.startswith(("batch=", "frames=")))}
    print(json.dumps(check(device, dtype, emulate=emulate, **sizes)))
