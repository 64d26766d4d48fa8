"""``KokoroModel``: Kokoro-82M (StyleTTS2 + ISTFTNet) with a batched forward.

Kokoro's own ``KModel.forward_with_tokens`` takes one utterance. :meth:`KokoroModel.synthesize`
takes many: token ids are right-padded, ALBERT masks padded keys, LSTMs see each item's length, each item's
predicted durations build its own alignment, the decoder runs over the padded frames with masked
statistics, and each item's audio is cut to its own length (600 samples per alignment frame).

The text side (ALBERT, encoders, LSTMs, prosody) runs in float32 (or float64); ``decoder_dtype``
(bf16/fp16 on CUDA) applies to the convolutional decoder, where the time goes.
"""

from __future__ import annotations

import copy
import math
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from tts.kokoro import config as kconfig
from tts.kokoro.albert import Albert
from tts.kokoro.decoder import Decoder, Generator
from tts.kokoro.fused import EAGER_KERNELS, Kernels
from tts.kokoro.layers import AdaIN1d, AdainResBlk1d, AdaINResBlock1, Span
from tts.kokoro.prosody import ProsodyPredictor, TextEncoder

PARTS = ("bert", "bert_encoder", "predictor", "text_encoder", "decoder")


@dataclass
class Utterance:
    """One item of a batch: phoneme ids (no boundary tokens), a 256-d style row, speed, optional noise seed."""

    ids: list[int]
    style: torch.Tensor
    speed: float = 1.0
    seed: int | None = None


@dataclass
class BatchResult:
    audio: list[np.ndarray]  # float32 in [-1, 1] (clamped), one per utterance
    durations: list[list[int]]  # frames per token, boundary tokens included
    frames: int  # padded alignment frames of the batch


class KokoroModel(nn.Module):
    def __init__(self, config: dict[str, Any]):
        super().__init__()
        cfg = kconfig.normalize(config)
        self.config = cfg
        self.vocab: dict[str, int] = cfg["vocab"]
        hidden, style = int(cfg["hidden_dim"]), int(cfg["style_dim"])
        self.style_dim = style
        self.bert = Albert(int(cfg["n_token"]), cfg["plbert"])
        self.bert_encoder = nn.Linear(self.bert.hidden_size, hidden)
        self.predictor = ProsodyPredictor(style_dim=style, d_hid=hidden, nlayers=int(cfg["n_layer"]),
                                          max_dur=int(cfg["max_dur"]))
        self.text_encoder = TextEncoder(channels=hidden, kernel_size=int(cfg["text_encoder_kernel_size"]),
                                        depth=int(cfg["n_layer"]), n_symbols=int(cfg["n_token"]))
        self.decoder = Decoder(dim_in=hidden, style_dim=style, istftnet=cfg["istftnet"],
                               decoder_dim=int(cfg["decoder_dim"]), asr_res_dim=int(cfg["asr_res_dim"]))
        self._kernels: Kernels = EAGER_KERNELS
        self._compiled_kernels: Kernels | None = None
        self.graphs: Any = None  # tts.kokoro.decoder_graphs.DecoderGraphs once enable_decoder_graphs ran
        self.text_graphs: Any = None  # tts.kokoro.text_graphs.TextGraphs once enable_text_graphs ran
        # Seconds spent per phase of the batched forward, summed over calls: issuing the text side's work
        # ("text_launch"), waiting for its durations ("text_wait"), issuing the rest ("rest_launch": alignment,
        # F0/energy, text encoder, decoder) and waiting for the audio ("rest_wait"). Launch-heavy: the host
        # (the interpreter) is the limit; wait-heavy: the GPU (or what shares it) is.
        self.phase_s: dict[str, float] = dict.fromkeys(("text_launch", "text_wait", "rest_launch", "rest_wait"), 0.0)
        self.eval()

    # ------------------------------------------------------------------ properties
    @property
    def device(self) -> torch.device:
        return self.bert_encoder.weight.device

    @property
    def sample_rate(self) -> int:
        return kconfig.SAMPLE_RATE

    @property
    def samples_per_frame(self) -> int:
        """Audio samples per alignment frame (600: 25 ms at 24 kHz)."""
        return 2 * self.decoder.generator.samples_per_frame

    @property
    def max_phonemes(self) -> int:
        """Longest id sequence one item may have (ALBERT positions minus the two boundary tokens)."""
        return self.bert.max_positions - 2

    @property
    def decoder_dtype(self) -> torch.dtype:
        return self.decoder.F0_conv.weight.dtype

    def set_decoder_dtype(self, dtype: torch.dtype) -> KokoroModel:
        """Run the decoder in ``dtype`` (its weights are cast); the text side keeps its precision."""
        self.decoder.to(dtype)
        return self

    @property
    def compiled(self) -> bool:
        """Whether the fused AdaIN/Snake steps run as ``torch.compile`` builds (:meth:`set_compiled`)."""
        return self._kernels.compiled

    def set_compiled(self, on: bool, mode: str | None = None) -> KokoroModel:
        """Run the fused AdaIN/Snake steps (:mod:`tts.kokoro.fused`) compiled or eagerly.

        The compiled build is made once per model and kept, so switching back and forth (the bench's
        side-by-side rows) compiles nothing twice; graphs are built on first use of a shape class.
        """
        if on and self._compiled_kernels is None:
            self._compiled_kernels = Kernels(compiled=True, mode=mode)
        self._kernels = self._compiled_kernels if on else EAGER_KERNELS  # type: ignore[assignment]
        for module in self.modules():
            if isinstance(module, AdaIN1d | AdainResBlk1d | AdaINResBlock1 | Generator):
                module.kernels = self._kernels
        return self

    def enable_decoder_graphs(self, max_batch: int = 64, **buckets: Any) -> Any:
        """Capture :meth:`acoustic_pass` (F0/energy + the decoder) as CUDA graphs per (batch, frames) bucket
        (``tts.kokoro.decoder_graphs``); later batches that fit a bucket replay one. Call after the dtype and
        compile settings: graphs freeze them."""
        from tts.kokoro.decoder_graphs import DecoderGraphs

        graphs = DecoderGraphs(self, max_batch=max_batch, **buckets)
        graphs.capture_all()
        self.graphs = graphs
        return graphs

    def enable_text_graphs(self, max_batch: int = 64, **buckets: Any) -> Any:
        """Capture :meth:`text_pass` (ALBERT, the encoders, the duration LSTMs) as CUDA graphs per (batch,
        tokens) bucket (``tts.kokoro.text_graphs``); batches past every bucket run it eagerly."""
        from tts.kokoro.text_graphs import TextGraphs

        graphs = TextGraphs(self, max_batch=max_batch, **buckets)
        graphs.capture_all()
        self.text_graphs = graphs
        return graphs

    def lane_view(self) -> KokoroModel:
        """This model's weights (shared, not copied) under graphs of their own: a second batcher lane
        (``SynthesisBatcher(first_model=...)``) replays its own buckets while this model's replay theirs."""
        view = copy.copy(self)  # a new instance dict; the modules, parameters and buffers are this model's
        view.graphs = None
        view.text_graphs = None
        view.phase_s = dict.fromkeys(self.phase_s, 0.0)
        return view

    def parameter_bytes(self) -> int:
        return sum(p.numel() * p.element_size() for p in self.parameters())

    # ------------------------------------------------------------------ the batched forward
    def synthesize(self, items: list[Utterance], frame_bucket: int = 1) -> BatchResult:
        """Synthesize every utterance in one pass; ``frame_bucket`` rounds padded frames up (fewer shapes).

        On the CPU oneDNN is switched off for the call: it builds new kernels for every new shape
        (seconds each on a small machine) and every clause has new shapes. The switch is process-wide
        while the call runs; other threads' CPU ops are then only slower, never wrong.
        """
        if not items:
            return BatchResult([], [], 0)
        if self.device.type == "cpu" and torch.backends.mkldnn.enabled:
            torch.backends.mkldnn.enabled = False
            try:
                return self._forward(items, frame_bucket)
            finally:
                torch.backends.mkldnn.enabled = True
        return self._forward(items, frame_bucket)

    @torch.inference_mode()
    def _forward(self, items: list[Utterance], frame_bucket: int) -> BatchResult:
        dev = self.device
        t0 = time.perf_counter()
        text_dtype = self.bert_encoder.weight.dtype
        work = torch.promote_types(text_dtype, torch.float32)
        for it in items:
            if not it.ids:
                raise ValueError("an utterance needs at least one phoneme id")
            if len(it.ids) > self.max_phonemes:
                raise ValueError(f"{len(it.ids)} phoneme ids exceed Kokoro's {self.max_phonemes}")
        lengths = [len(it.ids) + 2 for it in items]
        t = max(lengths)
        ids = np.zeros((len(items), t), dtype=np.int64)
        for row, it in enumerate(items):
            ids[row, 1:1 + len(it.ids)] = it.ids
        ids_t = torch.from_numpy(ids).to(dev, non_blocking=True)
        tokens = Span.of(lengths, t, dev, text_dtype)
        ref = torch.stack([it.style.reshape(-1) for it in items]).to(dev, text_dtype, non_blocking=True)
        # dense copies: a view's offset or row stride would be one more compiled-graph variant (tts/kokoro/fused.py)
        dense = torch.contiguous_format
        s_dec = ref[:, : self.style_dim].clone(memory_format=dense)
        s_pro = ref[:, self.style_dim:].clone(memory_format=dense)
        speed = torch.tensor([it.speed for it in items], dtype=text_dtype).to(dev, non_blocking=True)

        d, dur, t_en = self._text_side(ids_t, tokens, lengths, s_pro, speed)
        t1 = time.perf_counter()
        dur_host = dur.cpu().numpy()  # the batch's one device-to-host sync before the decoder
        t2 = time.perf_counter()
        durations = [dur_host[row, :n].tolist() for row, n in enumerate(lengths)]
        frames = [int(sum(x)) for x in durations]
        f = _round_up(max(frames), frame_bucket)
        index = np.zeros((len(items), f), dtype=np.int64)
        for row, per_token in enumerate(durations):
            index[row, : frames[row]] = np.repeat(np.arange(len(per_token)), per_token)
        index_t = torch.from_numpy(index).to(dev, non_blocking=True)
        fspan = Span.of(frames, f, dev, text_dtype)
        fspan2 = Span.of([2 * n for n in frames], 2 * f, dev, text_dtype)

        en = _align(d.transpose(1, 2), index_t) * fspan.mask  # (B, C + S, F)
        asr = _align(t_en, index_t) * fspan.mask

        dd = self.decoder_dtype
        spf = self.samples_per_frame
        noise = _noise(items, [n * spf for n in frames], f * spf, dev, work)
        out_lengths = [n * spf for n in frames]
        pieces: list[tuple[list[int] | None, torch.Tensor]] = []  # (rows, or None for all; their padded audio)
        groups, eager = self.graphs.plan([_round_up(n, frame_bucket) for n in frames]) if self.graphs else ([], [])
        whole = self.graphs is not None and not eager and len(groups) == 1
        if whole:  # one replay of the bucket the plan chose for the whole batch
            args = (en, asr.to(dd), s_pro, s_dec.to(dd), fspan.lens, noise)
            audio = self.graphs.run(*args)
            pieces.append((None, audio if audio is not None else self.acoustic_pass(*args)))
        elif self.graphs is not None:  # replays of the plan's groups of rows, and the rows no bucket holds eagerly
            self.graphs.split_batches += len(groups) > 1 or bool(groups and eager)
            self.graphs.fallbacks += bool(eager)
            for rows in groups:
                pieces.append((rows, self._rows_acoustic(rows, frames, frame_bucket, en, asr, s_pro, s_dec,
                                                         fspan.lens, noise, replay=True)))
            if eager:
                pieces.append((eager, self._rows_acoustic(eager, frames, frame_bucket, en, asr, s_pro, s_dec,
                                                          fspan.lens, noise, replay=False)))
        else:
            f0, energy = self.predictor.f0_energy(en, s_pro, fspan, fspan2)
            audio, out_lengths = self.decoder(asr.to(dd), f0.to(dd), energy.to(dd), s_dec.to(dd), fspan.to(dd),
                                              fspan2.to(dd), noise, work)
            pieces.append((None, audio))
        pieces = [(rows, torch.nan_to_num(a.float(), nan=0.0, posinf=1.0, neginf=-1.0).clamp_(-1.0, 1.0))
                  for rows, a in pieces]
        t3 = time.perf_counter()
        out: list[np.ndarray | None] = [None] * len(items)
        for rows, a in pieces:
            host = a.cpu().numpy()
            for j, row in enumerate(range(len(items)) if rows is None else rows):
                out[row] = host[j, :out_lengths[row]].copy()
        t4 = time.perf_counter()
        phase = self.phase_s
        phase["text_launch"] += t1 - t0
        phase["text_wait"] += t2 - t1
        phase["rest_launch"] += t3 - t2
        phase["rest_wait"] += t4 - t3
        return BatchResult(out, durations, f)

    def _text_side(self, ids: torch.Tensor, tokens: Span, lengths: list[int], s_pro: torch.Tensor,
                   speed: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """:meth:`text_pass` for the batch: replays of the text graphs as their plan cuts the batch's rows
        (``graph_buckets``: one replay when one bucket is the cheapest way), the groups' outputs scattered back into
        the batch's padded ones, the rows no bucket holds eagerly; eagerly whole without text graphs."""
        graphs = self.text_graphs
        if graphs is None:
            return self.text_pass(ids, tokens, s_pro, speed)
        groups, eager = graphs.plan(lengths)
        if not eager and len(groups) == 1:
            text = graphs.run(ids, tokens.lens, s_pro, speed)
            return text if text is not None else self.text_pass(ids, tokens, s_pro, speed)
        if not groups:
            graphs.fallbacks += 1
            return self.text_pass(ids, tokens, s_pro, speed)
        graphs.split_batches += 1
        graphs.fallbacks += bool(eager)
        b, t = ids.shape
        out: list[torch.Tensor] = []
        for rows, replay in [(rows, True) for rows in groups] + ([(eager, False)] if eager else []):
            n = max(lengths[r] for r in rows)
            idx = torch.tensor(rows, device=ids.device)
            part = graphs.run(ids[idx, :n], tokens.lens[idx], s_pro[idx], speed[idx]) if replay else None
            if part is None:
                span = Span.of([lengths[r] for r in rows], n, ids.device, tokens.mask.dtype)
                part = self.text_pass(ids[idx, :n], span, s_pro[idx], speed[idx])
            if not out:  # the batch's outputs: d (b, t, C + S), dur (b, t), t_en (b, C, t), zero padded
                out = [part[0].new_zeros(b, t, part[0].shape[2]), part[1].new_zeros(b, t),
                       part[2].new_zeros(b, part[2].shape[1], t)]
            out[0][idx, :n] = part[0]
            out[1][idx, :n] = part[1]
            out[2][idx, :, :n] = part[2]
        return out[0], out[1], out[2]

    def _rows_acoustic(self, rows: list[int], frames: list[int], frame_bucket: int, en: torch.Tensor,
                       asr: torch.Tensor, s_pro: torch.Tensor, s_dec: torch.Tensor, lens: torch.Tensor,
                       noise: torch.Tensor, replay: bool) -> torch.Tensor:
        """The padded audio of ``rows`` of a batch: replayed from the bucket that holds them, or eagerly
        (:meth:`acoustic_pass`). Inputs past each row's frames are zero, so a row's audio does not depend on
        the rows it is grouped with or on the padding."""
        dd = self.decoder_dtype
        f = _round_up(max(frames[r] for r in rows), frame_bucket)
        idx = torch.tensor(rows, device=en.device)
        args = (en[idx, :, :f], asr[idx, :, :f].to(dd), s_pro[idx], s_dec[idx].to(dd), lens[idx],
                noise[idx, : f * self.samples_per_frame])
        audio = self.graphs.run(*args) if replay and self.graphs is not None else None
        return audio if audio is not None else self.acoustic_pass(*args)

    def text_pass(self, ids: torch.Tensor, tokens: Span, s_pro: torch.Tensor, speed: torch.Tensor
                  ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The text side up to the durations, device operations only (``tokens.lens`` is all it reads of the
        lengths, so a CUDA graph can hold it): prosody features ``d`` (B, T, C + S), frames per token (B, T)
        int64 (0 past each item) and the text encoder's output (B, C, T)."""
        bert = self.bert(ids, tokens.mask[:, 0, :] > 0)
        d_en = self.bert_encoder(bert).transpose(1, 2) * tokens.mask
        d = self.predictor.text_encoder(d_en, s_pro, tokens)  # (B, T, C + S)
        dur = self.predictor.durations(d, tokens, speed)
        dur = torch.round(dur).clamp(min=1).long() * tokens.mask[:, 0, :].long()
        return d, dur, self.text_encoder(ids, tokens)

    def acoustic_pass(self, en: torch.Tensor, asr: torch.Tensor, s_pro: torch.Tensor, s_dec: torch.Tensor,
                      frames: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
        """F0 and energy from the aligned prosody features ``en`` (B, C + S, F), then the decoder over ``asr``
        (B, C, F, decoder dtype): padded audio (B, F x 600). ``frames`` (B,) int64 on the device is all it
        reads of the lengths (what the captured graphs run)."""
        text_dtype, dd = en.dtype, asr.dtype
        total = en.shape[-1]
        fspan, fspan2 = Span.of_lens(frames, total, text_dtype), Span.of_lens(2 * frames, 2 * total, text_dtype)
        f0, energy = self.predictor.f0_energy(en, s_pro, fspan, fspan2)
        audio, _ = self.decoder(asr, f0.to(dd), energy.to(dd), s_dec, fspan.to(dd), fspan2.to(dd), noise,
                                noise.dtype)
        return audio


def _align(x: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """Kokoro's ``x @ pred_aln_trg`` as a gather: (B, C, T) -> (B, C, F) by each frame's token."""
    return torch.gather(x, 2, index[:, None, :].expand(-1, x.shape[1], -1))


def _round_up(n: int, multiple: int) -> int:
    return int(math.ceil(n / multiple) * multiple) if multiple > 1 else n


def _noise(items: list[Utterance], lengths: list[int], total: int, dev: torch.device,
           dtype: torch.dtype) -> torch.Tensor:
    """Standard normal (B, total); an item with a seed gets the same noise alone or batched."""
    if all(it.seed is None for it in items):
        return torch.randn(len(items), total, device=dev, dtype=dtype)
    out = torch.zeros(len(items), total, device=dev, dtype=dtype)
    for row, (it, n) in enumerate(zip(items, lengths, strict=True)):
        gen = torch.Generator(device=dev)
        if it.seed is not None:
            gen.manual_seed(it.seed)
        else:
            gen.seed()
        out[row, :n] = torch.randn(n, generator=gen, device=dev, dtype=dtype)
    return out
