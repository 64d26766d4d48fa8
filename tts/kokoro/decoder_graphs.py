"""Kokoro's acoustic side (F0/energy prediction + the decoder) replayed from CUDA graphs, one per (batch,
frames) bucket.

Why: the eager decoder is thousands of small kernel launches from Python (52 ms for one utterance on
the H200, run 17, where the GPU work is a few ms), and inside a process that also serves sockets and a
Parakeet batcher those launches wait for the GIL: run 25 measured a batch of 8 taking ~250 ms in the
engine process against 64 ms alone. A replayed graph is one launch.

How: ``KokoroModel.acoustic_pass`` has no host value in it once its lengths are a device tensor
(``Span.of_lens``, ``layers.masked_lstm``), so for a bucket (B, F) it is captured once over static input
buffers (B rows, F frames); a batch of b <= B items of f <= F frames is zero-padded into them (rows past b have length 0),
replayed, and its audio copied out before the next replay. Buckets: batches 1, 2, 4, ... up to
``max_batch`` and frames in steps of ``frame_step`` up to ``max_frames``, limited to ``max_cells``
batch x frames (memory grows with both). All graphs share one memory pool (one replay at a time, outputs
copied out under a lock), so the pool is about the largest bucket's activations.

Which replays run a batch (``plan = "cost"``, the default): each bucket's replay is timed once after capture,
and a batch's rows, longest first, are cut into the groups whose buckets' summed replay time is least
(``graph_buckets.plan_rows``). A bucket is padded in rows (powers of two) and in frames (to its longest row), and a replay's
time grows with both: 33 clauses in the 64-row bucket cost what 64 do, and short clauses padded to a long one
cost what long ones do. ``plan = "fewest"``: one replay of the smallest bucket holding the whole batch, else
groups as large as the buckets allow (``graph_buckets.split_rows``). Either way only a row longer than every bucket runs
eagerly.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from tts.kokoro.graph_buckets import TimedBuckets, bucket_sizes

if TYPE_CHECKING:
    from tts.kokoro.model import KokoroModel


@dataclass
class _Bucket:
    batch: int
    frames: int
    en: torch.Tensor  # (B, C + S, F) text dtype: the aligned prosody features
    asr: torch.Tensor  # (B, C, F) decoder dtype
    s_pro: torch.Tensor  # (B, S) text dtype
    style: torch.Tensor  # (B, S) decoder dtype
    lens: torch.Tensor  # (B,) int64: frames per item, 0 for an unused row
    noise: torch.Tensor  # (B, F * samples_per_frame) work dtype
    graph: torch.cuda.CUDAGraph | None = None
    audio: torch.Tensor | None = None  # the captured output (B, T)


class DecoderGraphs(TimedBuckets):
    """CUDA graphs of ``model.acoustic_pass`` per bucket (see the module docstring)."""

    _buckets: dict[tuple[int, int], _Bucket]

    side = "acoustic"

    def __init__(self, model: KokoroModel, max_batch: int = 64, frame_step: int = 32, max_frames: int = 512,
                 max_cells: int = 64 * 192, plan: str = "cost"):
        self.model = model
        self.init_graphs(model.device, plan)
        self.dtype = model.decoder_dtype
        self.text_dtype = model.bert_encoder.weight.dtype
        self.work = torch.promote_types(self.text_dtype, torch.float32)
        self.channels, self.style_dim = int(model.config["hidden_dim"]), model.style_dim
        self.spf = model.samples_per_frame
        self.sizes = bucket_sizes(max_batch, frame_step, max_frames, max_cells)

    # ------------------------------------------------------------------ capture
    def _buffers(self, b: int, f: int) -> _Bucket:
        z = dict(device=self.device)
        c, s = self.channels, self.style_dim
        return _Bucket(b, f, torch.zeros(b, c + s, f, dtype=self.text_dtype, **z),
                       torch.zeros(b, c, f, dtype=self.dtype, **z), torch.zeros(b, s, dtype=self.text_dtype, **z),
                       torch.zeros(b, s, dtype=self.dtype, **z), torch.full((b,), f, dtype=torch.int64, **z),
                       torch.zeros(b, f * self.spf, dtype=self.work, **z))

    def _body(self, k: _Bucket) -> torch.Tensor:
        return self.model.acoustic_pass(k.en, k.asr, k.s_pro, k.style, k.lens, k.noise)

    @torch.inference_mode()
    def capture(self, b: int, f: int) -> None:
        """Capture the bucket of ``b`` rows of ``f`` frames (``capture_graph``)."""
        k = self._buffers(b, f)
        k.graph, k.audio = self.capture_graph(lambda: self._body(k))
        self._buckets[(b, f)] = k

    # ------------------------------------------------------------------ replay
    @torch.inference_mode()
    def run(self, en: torch.Tensor, asr: torch.Tensor, s_pro: torch.Tensor, style: torch.Tensor, lens: torch.Tensor,
            noise: torch.Tensor) -> torch.Tensor | None:
        """The audio (b, T) for the aligned features ``en`` (b, C + S, f) and ``asr`` (b, C, f) (``lens`` (b,)
        int64 frames per item, inputs zero past each item), from the bucket's graph; None when no bucket holds
        the batch (run it eagerly)."""
        b, f = asr.shape[0], asr.shape[-1]
        k = self.pick(b, f)
        if k is None:
            self.fallbacks += 1
            return None
        with self._lock:
            for dst, src in ((k.en, en), (k.asr, asr), (k.noise, noise)):
                dst.zero_()
                dst[:b, ..., : src.shape[-1]].copy_(src)
            k.s_pro[:b].copy_(s_pro)
            k.style[:b].copy_(style)
            k.lens.zero_()
            k.lens[:b].copy_(lens)
            assert k.graph is not None and k.audio is not None
            k.graph.replay()
            self.replays += 1
            # out of the shared pool before any other replay can write there
            return k.audio[:b, : (f * self.spf)].clone()
