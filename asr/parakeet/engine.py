"""The Parakeet-TDT engine: audio in, text with token and word timestamps out.

    engine = ParakeetEngine.from_pretrained("ckpt/", device="cpu", dtype="float32", encoder_backend="eager")
    results = engine.transcribe([audio_16k_float32, ...])   # list[TranscriptResult]

The pieces (features, encoder backend, label-looping decoder) are public for the streaming
batcher and the offline pipeline, which call ``encode`` and ``decode`` directly.

Decoder loop: on CUDA every decode runs through ``asr.parakeet.decoding.graph_decoder.GraphDecoder``
in ``decoder_graph_mode`` (``auto`` | ``conditional`` | ``graphs`` | ``eager``; ``auto`` picks the
best the driver supports and falls back if building fails); on the CPU it is the plain loop
(``LabelLoopingDecoder.run``) whatever the mode. The mode is validated on every device.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from asr.parakeet.decoding.label_looping import DecodedSeq, DecoderCarry, DecoderState, LabelLoopingDecoder
from asr.parakeet.encoders import EncoderBackend, EncoderOutput, create_encoder
from asr.parakeet.encoders.base import subsampled_lengths
from asr.parakeet.features import LogMelFeatures
from asr.parakeet.loading import ParakeetCheckpoint, load_parakeet, parse_dtype
from asr.parakeet.tokenizer import group_words
from asr.words import Word

if TYPE_CHECKING:
    from asr.parakeet.decoding.carry_bank import CarryBank
    from asr.parakeet.decoding.graph_decoder import GraphDecoder

DECODER_GRAPH_MODES = ("auto", "conditional", "graphs", "eager")

# What one more encoder replay costs, in ``ShapeProfile.cost`` units (batch x feature frames): on the
# H200 a replay of the v3-sized encoder takes ~2.7 ms however small, then ~0.3 us per unit
# (bench/results/NOTES.md run 15: 3.0 ms at 8 x 256, 6.8 ms at 48 x 256). Windows are split into
# length groups only where the padding saved outweighs this.
REPLAY_OVERHEAD_COST = 9000.0


def check_decoder_graph_mode(mode: object) -> str:
    """``mode`` normalized (stripped, lower case), or a ValueError naming the valid modes."""
    text = mode.strip().lower() if isinstance(mode, str) else getattr(mode, "value", mode)
    if text not in DECODER_GRAPH_MODES:
        raise ValueError(f"unknown decoder_graph_mode {mode!r}: expected one of {', '.join(DECODER_GRAPH_MODES)}")
    return str(text)


def make_graph_decoder(decoder: LabelLoopingDecoder, mode: str = "auto") -> GraphDecoder | None:
    """The GPU loop driver for ``decoder`` on CUDA; None (the plain loop) on any other device."""
    mode = check_decoder_graph_mode(mode)
    if decoder.device.type != "cuda":
        return None
    from asr.parakeet.decoding.graph_decoder import GraphDecoder

    return GraphDecoder(decoder, mode)


@dataclass
class TranscriptResult:
    """One utterance: text, tokens with start times and durations (seconds), words."""

    text: str
    tokens: list[int]
    token_starts: list[float]
    token_durations: list[float]
    words: list[Word] = field(default_factory=list)


def pad_batch(audios: Sequence[np.ndarray | torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """Stack mono clips into ``[B, N]`` float32 with lengths (zero padded)."""
    lengths = torch.tensor([len(a) for a in audios], dtype=torch.long)
    batch = torch.zeros(len(audios), int(lengths.max()) if len(audios) else 0, dtype=torch.float32)
    for i, audio in enumerate(audios):
        batch[i, : len(audio)] = torch.as_tensor(np.asarray(audio, dtype=np.float32))
    return batch, lengths


def length_groups(frames: Sequence[int], profiles: Sequence[Any],
                  overhead: float = REPLAY_OVERHEAD_COST) -> list[list[int]]:
    """Rows (by feature frames) split into groups that each run in their own profile, cheapest overall.

    Each row is bucketed by the shortest profile length that holds it (rows past every profile form
    the last bucket); adjacent buckets may merge. Of the 2^(k-1) ways to merge k buckets the one with
    the least ``sum(plan cost + overhead)`` wins, ties to fewer groups. One group: ``[all rows]``.
    """
    from asr.parakeet.encoders.shape_profiles import plan_batches

    sizes = sorted({p.frames for p in profiles})
    longest = sizes[-1]

    def bucket(f: int) -> int:
        return next((s for s in sizes if s >= f), longest + 1)  # past every profile: one bucket

    buckets: dict[int, list[int]] = {}
    for i, f in enumerate(frames):
        buckets.setdefault(bucket(f), []).append(i)
    keys = sorted(buckets)
    if len(keys) < 2:
        return [list(range(len(frames)))]

    def cost(rows: list[int]) -> float:
        f = max(frames[i] for i in rows)
        if f > longest:  # eager past every profile: priced as the longest, scaled
            return len(rows) * f * (1.0 + f / 62_500) + overhead
        return sum(p.cost + overhead for p, _, _ in plan_batches(list(profiles), len(rows), f))

    best: tuple[float, int, list[list[int]]] | None = None
    for mask in range(1 << (len(keys) - 1)):  # bit j set: a group boundary after bucket j
        groups, current = [], []
        for j, key in enumerate(keys):
            current += buckets[key]
            if j == len(keys) - 1 or mask >> j & 1:
                groups.append(current)
                current = []
        candidate = (sum(cost(g) for g in groups), len(groups), groups)
        if best is None or candidate[:2] < best[:2]:
            best = candidate
    assert best is not None
    return best[2]


class ParakeetEngine:
    """Features + encoder backend + greedy TDT decoder over one loaded checkpoint (thread-safe calls)."""

    def __init__(
        self,
        checkpoint: ParakeetCheckpoint,
        device: str | torch.device = "cpu",
        dtype: str | torch.dtype = torch.float32,
        encoder_backend: str = "eager",
        decoder_dtype: str | torch.dtype = torch.float32,
        decoder_graph_mode: str = "auto",
        graph_features: bool = True,
        **encoder_options: Any,
    ) -> None:
        self.decoder_graph_mode = check_decoder_graph_mode(decoder_graph_mode)
        self.checkpoint = checkpoint
        self.device = torch.device(device)
        self.dtype = parse_dtype(dtype)
        self.tokenizer = checkpoint.tokenizer
        self.sample_rate = checkpoint.features.sample_rate
        self.frame_seconds = checkpoint.frame_seconds
        self.samples_per_frame = round(self.frame_seconds * self.sample_rate)
        model = checkpoint.model
        self.decoder = LabelLoopingDecoder.from_model(model, device=self.device, dtype=parse_dtype(decoder_dtype))
        # CUDA: the loop as one graph (WHILE nodes) or a fallback mode; CPU: None, the plain loop.
        self.graph_decoder: GraphDecoder | None = make_graph_decoder(self.decoder, self.decoder_graph_mode)
        self.features = LogMelFeatures(checkpoint.features).to(self.device)
        self.encoder: EncoderBackend = create_encoder(
            encoder_backend, model, device=self.device, dtype=self.dtype, **encoder_options)
        # cuda_graphs on CUDA: the features are captured in the encoder's graphs (audio in, frames out)
        self.graphed_features = (graph_features and self.device.type == "cuda"
                                 and hasattr(self.encoder, "attach_features"))
        if self.graphed_features:
            self.encoder.attach_features(self.features)
        self._state: DecoderState | None = None
        self._lock = threading.RLock()

    @classmethod
    def from_pretrained(
        cls,
        source: str | Path,
        device: str | torch.device = "cpu",
        dtype: str | torch.dtype = "float32",
        encoder_backend: str = "eager",
        decoder_graph_mode: str = "auto",
        **encoder_options: Any,
    ) -> ParakeetEngine:
        """Load a checkpoint folder, ``.nemo`` file or Hub id and build the engine on ``device``.

        ``decoder_graph_mode`` (``auto`` | ``conditional`` | ``graphs`` | ``eager``) drives the decoder
        loop on CUDA; the CPU always runs the plain loop. An unknown mode is a ValueError.
        """
        decoder_graph_mode = check_decoder_graph_mode(decoder_graph_mode)  # fail before loading weights
        checkpoint = load_parakeet(source, device="cpu", dtype=torch.float32)
        return cls(checkpoint, device=device, dtype=dtype, encoder_backend=encoder_backend,
                   decoder_graph_mode=decoder_graph_mode, **encoder_options)

    # ------------------------------------------------------------------ stages
    def encode(self, audio: torch.Tensor, lengths: torch.Tensor, by_length: bool = False) -> EncoderOutput:
        """Padded audio ``[B, N]`` (16 kHz float) -> projected encoder frames and their lengths.

        ``by_length`` (host ``lengths``, an encoder with cost-ranked shape profiles): rows are grouped by
        the shortest profile length that holds them and each group runs at its own width, when that is
        cheaper than padding every row to the longest (:func:`length_groups`). Every row's valid frames
        are the same function of its audio either way; only the padding differs.
        """
        with self._lock, torch.inference_mode():
            groups = self._length_groups(lengths) if by_length else None
            # non_blocking: asynchronous from a pinned buffer (the batcher's staging), a plain copy otherwise
            audio = audio.to(self.device, non_blocking=audio.is_pinned())
            if groups is not None:
                return self._encode_groups(audio, lengths, groups)
            lengths = lengths.to(self.device, non_blocking=lengths.is_pinned())
            if self.graphed_features:
                return self.encoder.encode_audio(audio, lengths)
            feats, frames = self.features(audio, lengths)
            return self.encoder(feats, frames)

    def _length_groups(self, lengths: torch.Tensor) -> list[list[int]] | None:
        """Row groups for a length-grouped encode, or None where one call is as cheap (or grouping does
        not apply: an encoder without cost-ranked shape profiles, lengths on the device)."""
        profiles = getattr(self.encoder, "profiles", None)
        if not profiles or not hasattr(profiles[0], "cost") or lengths.device.type != "cpu" or lengths.numel() < 2:
            return None
        hop = self.features.config.hop_length
        groups = length_groups([n // hop + 1 for n in lengths.tolist()], profiles)
        return groups if len(groups) > 1 else None

    def _encode_groups(self, audio: torch.Tensor, lengths: torch.Tensor, groups: list[list[int]]) -> EncoderOutput:
        """One encoder call per row group, each at its own width; the rows back in order in one output."""
        host = lengths.tolist()
        device_lengths = lengths.to(self.device)
        parts = []
        for rows in groups:
            index = torch.tensor(rows, dtype=torch.long).to(self.device)
            group_audio = audio.index_select(0, index)[:, : max(host[i] for i in rows)]
            group_lengths = device_lengths.index_select(0, index)
            if self.graphed_features:
                part = self.encoder.encode_audio(group_audio, group_lengths)
            else:
                part = self.encoder(*self.features(group_audio, group_lengths))
            parts.append((index, part))
        first = parts[0][1].enc_proj
        frames = max(part.enc_proj.shape[1] for _, part in parts)
        enc = first.new_zeros(len(host), frames, first.shape[2])
        enc_lengths = torch.empty(len(host), dtype=torch.long, device=self.device)
        for index, part in parts:
            enc[index, : part.enc_proj.shape[1]] = part.enc_proj
            enc_lengths[index] = part.lengths.to(self.device)
        return EncoderOutput(enc, enc_lengths)

    def encoded_lengths(self, sample_lengths: Sequence[int]) -> list[int]:
        """Encoder frames of clips of ``sample_lengths`` samples, computed on the host (no device sync).

        Equal to ``encode(...).lengths``; a caller that needs the frame counts to plan the decode gets
        them without waiting for the encoder.
        """
        frames = self.features.frame_lengths(torch.as_tensor(list(sample_lengths), dtype=torch.long))
        return subsampled_lengths(self.checkpoint.model, frames).tolist()

    def decode(
        self,
        encoded: EncoderOutput,
        carry: Sequence[DecoderCarry | None] | None = None,
        start_frames: Sequence[int] | torch.Tensor | None = None,
        end_frames: Sequence[int] | torch.Tensor | None = None,
    ) -> tuple[list[DecodedSeq], list[DecoderCarry]]:
        """Greedy TDT over frames ``start..end`` of each row (defaults: all valid frames), reusing one state."""
        with self._lock:
            lengths = encoded.lengths if end_frames is None else end_frames
            if self.graph_decoder is not None:
                return self.graph_decoder.decode(encoded.enc_proj, lengths, carry=carry, start_frames=start_frames)
            state = self._plain_state(encoded.enc_proj.shape[0], encoded.enc_proj.shape[1])
            return self.decoder.decode(encoded.enc_proj, lengths, carry=carry, start_frames=start_frames, state=state)

    def decode_banked(
        self,
        encoded: EncoderOutput,
        bank: CarryBank,
        rows: torch.Tensor,
        start_frames: Sequence[int] | torch.Tensor | None = None,
        end_frames: Sequence[int] | torch.Tensor | None = None,
    ) -> list[DecodedSeq]:
        """Like :meth:`decode`, with row ``i`` continuing from (and saving to) ``bank`` row ``rows[i]``.

        The carries move with a few index ops whatever the batch size (no per-stream copies).
        """
        with self._lock:
            b = encoded.enc_proj.shape[0]
            lengths = encoded.lengths if end_frames is None else end_frames
            if self.graph_decoder is not None:
                state = self.graph_decoder.load(encoded.enc_proj, lengths, start_frames=start_frames)
                bank.load(state, rows)
                self.graph_decoder.loop()
            else:
                state = self._plain_state(b, encoded.enc_proj.shape[1])
                self.decoder.prepare(state, encoded.enc_proj, lengths, start_frames=start_frames)
                bank.load(state, rows)
                self.decoder.run(state)
            seqs = self.decoder.collect(state, b)  # the host sync; save the carries only once it succeeded
            bank.store(state, rows)
            return seqs

    def _plain_state(self, b: int, t: int) -> DecoderState:
        """The CPU path's reusable state, grown to hold ``b`` x ``t``."""
        state = self._state
        if state is None or state.batch_size < b or state.max_frames < t:
            grow_b = max(b, state.batch_size if state else 0)
            grow_t = max(t, state.max_frames if state else 0)
            state = self._state = self.decoder.alloc(grow_b, grow_t)
        return state

    def result(self, seq: DecodedSeq, offset_s: float = 0.0, frame_offset: int = 0) -> TranscriptResult:
        """Text, token times and words for a decoded sequence (frames counted from ``frame_offset``)."""
        fs = self.frame_seconds
        frames = [f + frame_offset for f in seq.frames]
        return TranscriptResult(
            text=self.tokenizer.decode(seq.tokens).strip(),
            tokens=list(seq.tokens),
            token_starts=[offset_s + f * fs for f in frames],
            token_durations=[d * fs for d in seq.durations],
            words=group_words(self.tokenizer, seq.tokens, frames, seq.durations, fs, offset_s),
        )

    # ------------------------------------------------------------------ whole utterances
    def transcribe(self, audios: Sequence[np.ndarray], batch_size: int = 16) -> list[TranscriptResult]:
        """Transcribe 16 kHz mono float32 clips (each at most a window long; see ``transcribe.py``)."""
        order = sorted(range(len(audios)), key=lambda i: len(audios[i]), reverse=True)
        results: list[TranscriptResult | None] = [None] * len(audios)
        for lo in range(0, len(order), max(1, batch_size)):
            idx = order[lo : lo + batch_size]
            seqs = self.transcribe_tokens([audios[i] for i in idx])
            for i, seq in zip(idx, seqs, strict=True):
                results[i] = self.result(seq)
        return [r for r in results if r is not None]

    def transcribe_tokens(self, audios: Sequence[np.ndarray]) -> list[DecodedSeq]:
        """One batch: encode and decode, tokens with frame indices."""
        audio, lengths = pad_batch(audios)
        seqs, _ = self.decode(self.encode(audio, lengths))
        return seqs

    def warmup(self) -> None:
        self.encoder.warmup()
        self.transcribe([np.zeros(self.sample_rate, dtype=np.float32)])
