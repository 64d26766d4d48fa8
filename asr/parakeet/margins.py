"""Decision margins of the greedy TDT decoder, and where two decodes of the same audio first part.

A greedy decode is a chain of decisions: at each step the label is the argmax of the token
logits and the jump the argmax of the duration logits. A decision's *margin* is top-1 minus
top-2 of those logits; a perturbation of the logits smaller than half the margin cannot change
it. So two decodes that differ only by rounding (bf16 vs fp32, fused vs torch step bodies) must
agree on every row whose decisions all have margins above the rounding's effect on the logits,
and where a row does part, some decision in the stretch where it parted must be a near tie.

``trace_decode`` runs the plain loop (torch step bodies) and records every decision;
``parting_margin`` finds, for a row that two decodes disagree on, the smallest reference margin
in the stretch where the first difference must have been decided.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from asr.parakeet.decoding.label_looping import DecodedSeq, DecoderState, LabelLoopingDecoder


@dataclass(frozen=True)
class Decision:
    """One step of one row: at ``frame`` with ``emitted`` tokens out so far, chose ``label``."""

    frame: int
    emitted: int  # tokens emitted before this decision (the predictor's position)
    label: int
    duration_index: int  # argmax of the duration logits
    label_margin: float  # top-1 minus top-2 of the token logits
    duration_margin: float  # top-1 minus top-2 of the duration logits
    logit_scale: float  # largest |logit| of the step (what the rounding is relative to)

    @property
    def margin(self) -> float:
        return min(self.label_margin, self.duration_margin)


def _top2_gap(logits: torch.Tensor) -> torch.Tensor:
    top = torch.topk(logits.float(), 2, dim=-1).values
    return top[:, 0] - top[:, 1]


class _Recorder:
    """Wraps a decoder's joint helpers (instance attributes, removed on exit) to log each decision."""

    def __init__(self, decoder: LabelLoopingDecoder, state: DecoderState, batch: int) -> None:
        self.decoder, self.state, self.batch = decoder, state, batch
        self.rows: list[list[Decision]] = [[] for _ in range(batch)]

    def _record(self, mask: torch.Tensor) -> None:
        s, d, b = self.state, self.decoder, self.batch
        logits = s.logits[:b].float()
        token_gap = _top2_gap(logits[:, : d.num_labels]).tolist()
        dur_gap = (_top2_gap(logits[:, d.num_labels :]) if len(d.durations) > 1
                   else torch.full((b,), float("inf"))).tolist()
        scale = logits.abs().amax(dim=-1).tolist()
        labels = logits[:, : d.num_labels].argmax(dim=-1).tolist()
        jumps = logits[:, d.num_labels :].argmax(dim=-1).tolist()
        frames, emitted, take = s.safe_time[:b].tolist(), s.out_len[:b].tolist(), mask[:b].tolist()
        for i in range(b):
            if take[i]:
                self.rows[i].append(Decision(frames[i], emitted[i], labels[i], jumps[i], token_gap[i], dur_gap[i],
                                             scale[i]))

    def __enter__(self) -> _Recorder:
        d, joint, joint_into = self.decoder, self.decoder._joint, self.decoder._joint_into

        def traced_joint(s: DecoderState) -> None:
            joint(s)
            self._record(s.active)  # outer step: every active row decides

        def traced_joint_into(s: DecoderState, mask: torch.Tensor) -> None:
            joint_into(s, mask)
            self._record(mask)  # inner step: rows still skipping blanks decide

        d._joint, d._joint_into = traced_joint, traced_joint_into  # type: ignore[method-assign]
        return self

    def __exit__(self, *exc: object) -> None:
        del self.decoder._joint, self.decoder._joint_into


def trace_decode(
    decoder: LabelLoopingDecoder,
    enc_proj: torch.Tensor,
    lengths: Sequence[int],
    state: DecoderState | None = None,
) -> tuple[list[DecodedSeq], list[list[Decision]]]:
    """The plain loop's results and every decision each row made, in order."""
    b, t = enc_proj.shape[0], enc_proj.shape[1]
    if state is None or state.batch_size < b or state.max_frames < t:
        state = decoder.alloc(b, t)
    decoder.prepare(state, enc_proj, list(lengths))
    with _Recorder(decoder, state, b) as recorder, torch.inference_mode():
        decoder.run(state)
    return decoder.collect(state, b), recorder.rows


def _events(seq: DecodedSeq) -> list[tuple[int, int, int]]:
    return list(zip(seq.tokens, seq.frames, seq.durations, strict=True))


def first_difference(reference: DecodedSeq, other: DecodedSeq) -> int | None:
    """Index of the first emitted (token, frame, duration) that differs; None if the rows are equal."""
    a, b = _events(reference), _events(other)
    for j, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return j
    return None if len(a) == len(b) else min(len(a), len(b))


def parting_margin(decisions: Sequence[Decision], reference: DecodedSeq, other: DecodedSeq) -> float | None:
    """Smallest reference margin among the decisions where ``other`` must have parted from it.

    Up to emission ``j`` (the first difference) both decodes made the same decisions, so they part
    at a step taken with ``j`` tokens out, at a frame no later than either one's ``j``-th emission.
    None when the rows agree. If every decision in that stretch had a margin above twice the
    largest logit perturbation, the two could not have parted there.
    """
    j = first_difference(reference, other)
    if j is None:
        return None
    ends = [s.frames[j] for s in (reference, other) if j < len(s.frames)]
    last = min(ends) if ends else None
    window = [d.margin for d in decisions if d.emitted == j and (last is None or d.frame <= last)]
    return min(window) if window else float("-inf")  # no reference decision there: cannot bound


def margin_stats(rows: Sequence[Sequence[Decision]], blank: int) -> dict[str, float]:
    """Quantiles of the label margin at emitting steps and of every step's margin."""
    emitting = [d.label_margin for row in rows for d in row if d.label != blank]
    steps = [d.margin for row in rows for d in row]
    if not emitting:
        return {"decisions": len(steps), "emitted": 0}

    def q(values: list[float], p: float) -> float:
        return float(torch.quantile(torch.tensor(values, dtype=torch.float64), p))

    return {"decisions": len(steps), "emitted": len(emitting), "emit_margin_p10": q(emitting, 0.1),
            "emit_margin_p50": q(emitting, 0.5), "step_margin_p01": q(steps, 0.01),
            "step_margin_p50": q(steps, 0.5), "step_margin_min": min(steps)}


def token_agreement(got: Sequence[Sequence[int]], reference: Sequence[Sequence[int]]) -> float:
    """Fraction of positions (over the longer of each pair) holding the same token."""
    same = total = 0
    for g, r in zip(got, reference, strict=True):
        total += max(len(g), len(r))
        same += sum(x == y for x, y in zip(g, r, strict=False))
    return same / total if total else 1.0


@torch.inference_mode()
def forced_margins(
    decoder: LabelLoopingDecoder,
    enc_proj: torch.Tensor,
    references: Sequence[DecodedSeq],
    decisions: Sequence[Sequence[Decision]],
) -> list[list[float]]:
    """Margins of the *reference's* choices when ``decoder`` (another precision) and ``enc_proj``
    (another encoder path) score the reference's own trajectory (teacher forcing).

    Per decision: chosen label minus the best other label, and the same for the duration (the
    smaller of the two); negative where this decoder would have chosen otherwise. The reference
    margin minus this one is the rounding's effect on that decision.
    """
    out: list[list[float]] = []
    dev, dtype = decoder.device, decoder.param_dtype
    num_labels = decoder.num_labels
    for i, (seq, steps) in enumerate(zip(references, decisions, strict=True)):
        h, c, sos_pred = decoder._sos_state(dev)
        preds = [sos_pred]
        if seq.tokens:
            ids = torch.tensor(seq.tokens, device=dev).unsqueeze(0)
            states = (h.unsqueeze(1).contiguous(), c.unsqueeze(1).contiguous())
            hidden, _ = decoder.lstm(decoder.embedding(ids), states)
            preds += list(decoder.pred_projector(hidden[0]))
        pred = torch.stack(preds)  # [tokens + 1, H]: the predictor after each prefix
        if not steps:
            out.append([])
            continue
        frames = torch.tensor([d.frame for d in steps], device=dev)
        emitted = torch.tensor([d.emitted for d in steps], device=dev)
        joint_in = torch.relu(enc_proj[i].to(dev, dtype)[frames] + pred[emitted])
        logits = decoder.joint_head(joint_in).float()
        label = torch.tensor([d.label for d in steps], device=dev)
        tok = logits[:, :num_labels]
        chosen = tok.gather(1, label[:, None])[:, 0]
        margin = chosen - tok.scatter(1, label[:, None], float("-inf")).max(dim=1).values
        if len(decoder.durations) > 1:
            dur = logits[:, num_labels:]
            ref_idx = torch.tensor([d.duration_index for d in steps], device=dev)
            picked = dur.gather(1, ref_idx[:, None])[:, 0]
            d_margin = picked - dur.scatter(1, ref_idx[:, None], float("-inf")).max(dim=1).values
            margin = torch.minimum(margin, d_margin)
        out.append(margin.tolist())
    return out


@dataclass
class Verdict:
    """How a decode compares with the traced reference, row by row."""

    rows: int
    identical: int
    unexplained: list[int]  # rows that parted at a decision far from any near tie: a bug
    confident: int  # rows without a single near tie (they must be identical)
    confident_identical: int
    agreement: float
    checked: float  # fraction of reference tokens before each row's first difference (all, if none)
    parting: list[tuple[int, float, float]]  # (row, parting margin, the rounding there)

    @property
    def ok(self) -> bool:
        return not self.unexplained and self.confident == self.confident_identical

    def as_dict(self) -> dict[str, object]:
        return {"rows": self.rows, "identical": self.identical, "confident": self.confident,
                "confident_identical": self.confident_identical, "unexplained": self.unexplained,
                "token_agreement": round(self.agreement, 5), "checked_fraction": round(self.checked, 5),
                "parting": self.parting}


def judge(
    references: Sequence[DecodedSeq],
    decisions: Sequence[Sequence[Decision]],
    forced: Sequence[Sequence[float]],
    got: Sequence[DecodedSeq],
    slack: float = 0.5,
) -> Verdict:
    """Compare ``got`` with the reference, allowing differences only where rounding could cause them.

    A decision is a *near tie* when its reference margin is at most twice the rounding measured
    there (reference margin minus the teacher-forced margin of the other precision, ``forced``)
    plus ``slack`` logits for what teacher forcing does not see (other kernels' rounding). A row
    that parts from the reference must have a near tie in the stretch where it parted; a row with
    no near tie at all must be identical.
    """
    identical = confident = confident_identical = checked = 0
    unexplained: list[int] = []
    parting: list[tuple[int, float, float]] = []
    for i, (ref, steps, shifts, other) in enumerate(zip(references, decisions, forced, got, strict=True)):
        tie = [d.margin <= 2 * abs(d.margin - f) + slack for d, f in zip(steps, shifts, strict=True)]
        j = first_difference(ref, other)
        same = j is None
        identical += same
        checked += len(ref.tokens) if same else j
        if not any(tie):
            confident += 1
            confident_identical += same
        if same:
            continue
        ends = [s.frames[j] for s in (ref, other) if j < len(s.frames)]
        last = min(ends) if ends else None
        window = [(d, f, t) for d, f, t in zip(steps, shifts, tie, strict=True)
                  if d.emitted == j and (last is None or d.frame <= last)]
        if not any(t for _, _, t in window):
            unexplained.append(i)
        if window:
            d, f, _ = min(window, key=lambda x: x[0].margin)
            parting.append((i, round(d.margin, 4), round(abs(d.margin - f), 4)))
    agreement = token_agreement([g.tokens for g in got], [r.tokens for r in references])
    total = sum(len(r.tokens) for r in references)
    return Verdict(len(references), identical, unexplained, confident, confident_identical, agreement,
                   checked / total if total else 1.0, parting)
