"""The label-looping TDT decoder driven by the GPU loop machinery: one CUDA graph with WHILE nodes.

Wraps :class:`asr.parakeet.decoding.label_looping.LabelLoopingDecoder` (its ``outer_step`` / ``inner_step`` are
captured as the bodies of an outer and a nested WHILE node). The state is preallocated for a
maximum batch and length; the graph is re-captured only when a request outgrows them (sizes round
up, so growth is rare). Modes: ``conditional`` (one graph replay per batch, no host round trips),
``graphs`` (each step a graph, host reads the flags), ``eager`` (the plain loop); ``auto`` picks the
best the driver and cuda-bindings support and falls back if building fails.

Step bodies (``step``): ``torch`` (the decoder's own ``outer_step``/``inner_step``, ~50 kernels per
step) or ``fused`` (:mod:`asr.parakeet.decoding.fused_step`: cuBLAS GEMMs plus one Triton kernel per
stage, 2 kernels per blank-skipping step); ``auto`` takes ``fused`` on CUDA when Triton is there.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

import torch

from asr.parakeet.decoding.graph_modes import GraphMode
from asr.parakeet.decoding.label_looping import DecodedSeq, DecoderCarry, DecoderState, LabelLoopingDecoder
from asr.parakeet.decoding.while_graph import LoopRunner, LoopSpec, build_loop

if TYPE_CHECKING:
    from asr.parakeet.decoding.fused_step import FusedSteps

log = logging.getLogger(__name__)


def grown(current: int, needed: int, quantum: int) -> int:
    """New capacity when ``needed`` exceeds ``current``: at least double, rounded up to ``quantum``."""
    if needed <= current:
        return current
    return max(needed, 2 * current, quantum) if current else max(needed, quantum)


def resolve_step(step: str, decoder: LabelLoopingDecoder) -> str:
    """``torch`` or ``fused`` for a requested ``auto``/``torch``/``fused`` (``fused`` needs Triton)."""
    step = step.strip().lower()
    if step not in ("auto", "torch", "fused"):
        raise ValueError(f"unknown decoder step {step!r} (auto, torch, fused)")
    if step != "auto":
        if step == "fused":
            from asr.parakeet.decoding import fused_step

            fused_step._require_triton()
        return step
    if decoder.device.type != "cuda":
        return "torch"
    from asr.parakeet.decoding import fused_step

    return "fused" if fused_step.available() and fused_step.supports(decoder) else "torch"


def round_up(value: int, quantum: int) -> int:
    return int(math.ceil(value / quantum) * quantum)


class GraphDecoder:
    """``decode(enc_proj, lengths)`` with the loop on the GPU; same tokens as ``LabelLoopingDecoder.run``."""

    def __init__(
        self,
        decoder: LabelLoopingDecoder,
        mode: str | GraphMode = "auto",
        max_batch: int = 0,
        max_frames: int = 0,
        batch_quantum: int = 8,
        frame_quantum: int = 64,
        step: str = "auto",
    ) -> None:
        self.decoder = decoder
        self.requested_step = step.strip().lower()
        self.step = resolve_step(step, decoder)
        self.fused: FusedSteps | None = None
        self.requested_mode = mode
        self.batch_quantum, self.frame_quantum = batch_quantum, frame_quantum
        self.state: DecoderState | None = None
        self.runner: LoopRunner | None = None
        self.captures = 0
        self.last_build_s = 0.0
        if max_batch and max_frames:
            self.ensure(max_batch, max_frames)

    @property
    def mode(self) -> GraphMode | None:
        return self.runner.mode if self.runner is not None else None

    def ensure(self, batch: int, frames: int) -> DecoderState:
        """Make sure the state (and graph) hold ``batch`` x ``frames``; re-capture only when they grow."""
        state = self.state
        if state is not None and batch <= state.batch_size and frames <= state.max_frames:
            return state
        old_b = state.batch_size if state is not None else 0
        old_t = state.max_frames if state is not None else 0
        new_b = round_up(grown(old_b, batch, self.batch_quantum), self.batch_quantum)
        new_t = round_up(grown(old_t, frames, self.frame_quantum), self.frame_quantum)
        start = time.perf_counter()
        self.runner = None
        self.state = None
        state = self.decoder.alloc(new_b, new_t)
        # A valid (one-frame) batch so the warm-up steps run on sane data.
        zeros = torch.zeros(
            new_b, 1, state.enc_proj.shape[-1], dtype=state.enc_proj.dtype, device=state.enc_proj.device
        )
        self.decoder.prepare(state, zeros, [1] * new_b)
        spec = self._fused_spec(state) if self.step == "fused" else None
        if spec is None:
            spec = LoopSpec(
                flag=state.outer_active,
                body=lambda: self.decoder.outer_step(state),
                inner=LoopSpec(flag=state.inner_active, body=lambda: self.decoder.inner_step(state)),
            )
        with torch.inference_mode():
            self.runner = build_loop(spec, state.enc_proj.device, self.requested_mode)
        self.state = state
        self.captures += 1
        self.last_build_s = time.perf_counter() - start
        log.info(
            "decoder %s loop (%s steps) for %dx%d built in %.3f s",
            self.runner.mode.value,
            self.step,
            new_b,
            new_t,
            self.last_build_s,
        )
        return state

    def _fused_spec(self, state: DecoderState) -> LoopSpec | None:
        """The fused bodies' loop, their kernels compiled by one warm-up step; None (torch steps) if
        that fails and the step was chosen automatically."""
        from asr.parakeet.decoding.fused_step import FusedSteps

        try:
            fused = FusedSteps(self.decoder, state)
            with torch.inference_mode():
                fused.reset_flags()
                fused.outer()
                fused.inner()
                fused.reset_flags()
        except Exception as exc:  # noqa: BLE001 - a Triton/driver problem: degrade when allowed
            if self.requested_step == "fused":
                raise
            log.warning("fused decoder steps unavailable (%s); using the torch step bodies", exc)
            self.step, self.fused = "torch", None
            self.decoder.prepare(state, state.enc_proj[:, :1], [1] * state.batch_size)
            return None
        self.fused = fused
        return LoopSpec(flag=fused.alive, body=fused.outer, inner=LoopSpec(flag=fused.advance_flag, body=fused.inner))

    def load(
        self,
        enc_proj: torch.Tensor,
        lengths: torch.Tensor | Sequence[int],
        carry: Sequence[DecoderCarry | None] | None = None,
        start_frames: torch.Tensor | Sequence[int] | None = None,
    ) -> DecoderState:
        """Copy a batch into the preallocated state (after this, ``enc_proj`` may be overwritten)."""
        state = self.ensure(enc_proj.shape[0], enc_proj.shape[1])
        self.decoder.prepare(state, enc_proj, lengths, carry=carry, start_frames=start_frames)
        return state

    def loop(self) -> None:
        """Run the decoding loop on the loaded state (no host sync in ``conditional`` mode)."""
        assert self.runner is not None
        with torch.inference_mode():
            if self.fused is not None:  # the state may have been edited since load (a CarryBank)
                self.fused.reset_flags()
            self.runner.run()

    def run(
        self,
        enc_proj: torch.Tensor,
        lengths: torch.Tensor | Sequence[int],
        carry: Sequence[DecoderCarry | None] | None = None,
        start_frames: torch.Tensor | Sequence[int] | None = None,
    ) -> DecoderState:
        """:meth:`load` then :meth:`loop`; results stay in the returned state."""
        state = self.load(enc_proj, lengths, carry=carry, start_frames=start_frames)
        self.loop()
        return state

    def decode(
        self,
        enc_proj: torch.Tensor,
        lengths: torch.Tensor | Sequence[int],
        carry: Sequence[DecoderCarry | None] | None = None,
        start_frames: torch.Tensor | Sequence[int] | None = None,
    ) -> tuple[list[DecodedSeq], list[DecoderCarry]]:
        """The whole decode: prepare, loop, collect tokens (one host sync) and carries."""
        b = enc_proj.shape[0]
        state = self.run(enc_proj, lengths, carry=carry, start_frames=start_frames)
        return self.decoder.collect(state, b), self.decoder.carry_out(state, b)
