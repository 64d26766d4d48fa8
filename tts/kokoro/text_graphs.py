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

import logging
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from tts.kokoro.graph_buckets import TimedBuckets, bucket_sizes
from tts.kokoro.layers import Span

if TYPE_CHECKING:
    from tts.kokoro.model import KokoroModel

log = logging.getLogger(__name__)


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

    side = "text"

    def __init__(self, model: KokoroModel, max_batch: int = 64, token_step: int = 32, max_tokens: int = 256,
                 max_cells: int = 64 * 128, plan: str = "cost"):
        self.model = model
        self.init_plan(plan)
        self.device = model.device
        if self.device.type != "cuda":
            raise ValueError("text-side CUDA graphs need the model on a CUDA device")
        self.dtype = model.bert_encoder.weight.dtype
        self.sizes = bucket_sizes(max_batch, token_step, max_tokens, max_cells)
        self._buckets: dict[tuple[int, int], _Bucket] = {}
        self._pool = torch.cuda.graph_pool_handle()
        # Captured on a stream of this set's own: cuBLAS's workspace is cached per (handle, stream) and baked into
        # the captured GEMMs (pytorch#193402), so two sets captured on torch's one default capture stream share it,
        # and replaying them at once from two threads (the first-clause lane beside the main lane) hung the GPU.
        self._capture_stream = torch.cuda.Stream(self.device)
        self._lock = threading.Lock()
        self.replays = 0
        self.fallbacks = 0  # batches with rows outside every bucket (run eagerly)
        self.split_batches = 0  # batches replayed in more than one group of rows (KokoroModel._text_side)
        self.capture_s = 0.0

    def _buffers(self, b: int, t: int) -> _Bucket:
        z = dict(device=self.device)
        return _Bucket(b, t, torch.zeros(b, t, dtype=torch.int64, **z), torch.full((b,), t, dtype=torch.int64, **z),
                       torch.zeros(b, self.model.style_dim, dtype=self.dtype, **z),
                       torch.ones(b, dtype=self.dtype, **z))

    def _body(self, k: _Bucket) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        return self.model.text_pass(k.ids, Span.of_lens(k.lens, k.tokens, self.dtype), k.s_pro, k.speed)

    @torch.inference_mode()
    def capture(self, b: int, t: int) -> None:
        """Warm the bucket's shapes up on a side stream (cuDNN plans, the LSTM copies), then capture."""
        k = self._buffers(b, t)
        side = torch.cuda.Stream(self.device)
        side.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(side):
            for _ in range(2):
                self._body(k)
        torch.cuda.current_stream(self.device).wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self._pool, stream=self._capture_stream, capture_error_mode="thread_local"):
            k.out = self._body(k)
        k.graph = graph
        self._buckets[(b, t)] = k

    def capture_all(self) -> None:
        """Capture every bucket, largest first (the shared pool is sized by the first)."""
        t0 = time.perf_counter()
        with self._lock:
            for b, t in sorted(self.sizes, key=lambda s: -s[0] * s[1]):
                if (b, t) not in self._buckets:
                    self.capture(b, t)
        torch.cuda.synchronize(self.device)
        self.capture_s += time.perf_counter() - t0
        log.info("kokoro text side: %d CUDA graphs captured in %.1f s", len(self._buckets), self.capture_s)
        if self.plan_mode == "cost":
            self.time_replays()

    @property
    def captured(self) -> int:
        return len(self._buckets)

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
