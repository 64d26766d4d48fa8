"""Kokoro's text side (ALBERT, the text and duration encoders, the duration LSTM) replayed from CUDA graphs,
one per (batch, tokens) bucket.

Why: with the decoder graphed (``decoder_graphs``), a tick of a few clauses still cost 60-70 ms in the engine
process on the H200 (runs 44-46) whatever its batch: the text side ran eagerly, hundreds of small launches
(12 ALBERT layers, packed LSTMs with their host lengths, layer norms) issued by a Python thread that shares the
interpreter with the engine's sockets. A replayed graph is one launch.

How: ``KokoroModel.text_pass`` reads the lengths only as a device tensor (``Span.of_lens``,
``layers.masked_lstm``), so for a bucket (B, T) it is captured once over static buffers: ids (B, T), lengths,
the prosody style and the speed. A batch of b <= B items of t <= T tokens is zero-padded into them (rows past
b get one token, so no attention row is empty), replayed, and its three outputs copied out. Which replays run a
batch is the decoder's plan over these buckets (``graph_buckets``: the least timed cost, or the fewest replays;
``KokoroModel._text_side``); only a clause past every bucket runs eagerly. The graphs share one pool of their own.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from tts.kokoro.graph_buckets import TimedBuckets, bucket_sizes
from tts.kokoro.layers import Span

if TYPE_CHECKING:
    from tts.kokoro.model import KokoroModel


@dataclass
class _Bucket:
    batch: int
    tokens: int
    ids: torch.Tensor  # (B, T) int64, boundary tokens included
    lens: torch.Tensor  # (B,) int64 tokens per item (1 for an unused row)
    s_pro: torch.Tensor  # (B, S)
    speed: torch.Tensor  # (B,)
    graph: torch.cuda.CUDAGraph | None = None
    out: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None  # d (B, T, C + S), dur (B, T), t_en (B, C, T)


class TextGraphs(TimedBuckets):
    """CUDA graphs of ``model.text_pass`` per bucket (see the module docstring)."""

    _buckets: dict[tuple[int, int], _Bucket]

    side = "text"

    def __init__(self, model: KokoroModel, max_batch: int = 64, token_step: int = 32, max_tokens: int = 256,
                 max_cells: int = 64 * 128, plan: str = "cost"):
        self.model = model
        self.init_graphs(model.device, plan)
        self.dtype = model.bert_encoder.weight.dtype
        self.sizes = bucket_sizes(max_batch, token_step, max_tokens, max_cells)

    def _buffers(self, b: int, t: int) -> _Bucket:
        z = dict(device=self.device)
        return _Bucket(b, t, torch.zeros(b, t, dtype=torch.int64, **z), torch.full((b,), t, dtype=torch.int64, **z),
                       torch.zeros(b, self.model.style_dim, dtype=self.dtype, **z),
                       torch.ones(b, dtype=self.dtype, **z))

    def _body(self, k: _Bucket) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        return self.model.text_pass(k.ids, Span.of_lens(k.lens, k.tokens, self.dtype), k.s_pro, k.speed)

    @torch.inference_mode()
    def capture(self, b: int, t: int) -> None:
        """Capture the bucket of ``b`` rows of ``t`` tokens (``capture_graph``)."""
        k = self._buffers(b, t)
        k.graph, k.out = self.capture_graph(lambda: self._body(k))
        self._buckets[(b, t)] = k

    @torch.inference_mode()
    def run(self, ids: torch.Tensor, lens: torch.Tensor, s_pro: torch.Tensor, speed: torch.Tensor
            ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None:
        """``text_pass``'s outputs for ``ids`` (b, t) (zero past each item's ``lens``), cut to (b, t); None
        when no bucket holds the batch (run it eagerly)."""
        b, t = ids.shape
        k = self.pick(b, t)
        if k is None:
            self.fallbacks += 1
            return None
        with self._lock:
            k.ids.zero_()
            k.ids[:b, :t].copy_(ids)
            k.lens.fill_(1)
            k.lens[:b].copy_(lens)
            k.s_pro.zero_()
            k.s_pro[:b].copy_(s_pro)
            k.speed.fill_(1.0)
            k.speed[:b].copy_(speed)
            assert k.graph is not None and k.out is not None
            k.graph.replay()
            self.replays += 1
            d, dur, t_en = k.out
            # out of the shared pool before any other replay can write there
            return d[:b, :t].clone(), dur[:b, :t].clone(), t_en[:b, :, :t].clone()
