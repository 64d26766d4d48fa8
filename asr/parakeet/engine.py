"""The Parakeet-TDT engine: audio in, text with token and word timestamps out.

    engine = ParakeetEngine.from_pretrained("ckpt/", device="cpu", dtype="float32", encoder_backend="eager")
    results = engine.transcribe([audio_16k_float32, ...])   # list[TranscriptResult]

The pieces (features, encoder backend, label-looping decoder) are public for the streaming
batcher and the offline pipeline, which call ``encode`` and ``decode`` directly.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from asr.parakeet.decoder import DecodedSeq, DecoderCarry, DecoderState, LabelLoopingDecoder
from asr.parakeet.encoders import EncoderBackend, EncoderOutput, create_encoder
from asr.parakeet.features import LogMelFeatures
from asr.parakeet.loading import ParakeetCheckpoint, load_parakeet, parse_dtype
from asr.parakeet.tokenizer import Word, group_words


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


class ParakeetEngine:
    """Features + encoder backend + greedy TDT decoder over one loaded checkpoint (thread-safe calls)."""

    def __init__(
        self,
        checkpoint: ParakeetCheckpoint,
        device: str | torch.device = "cpu",
        dtype: str | torch.dtype = torch.float32,
        encoder_backend: str = "eager",
        decoder_dtype: str | torch.dtype = torch.float32,
        **encoder_options: Any,
    ) -> None:
        self.checkpoint = checkpoint
        self.device = torch.device(device)
        self.dtype = parse_dtype(dtype)
        self.tokenizer = checkpoint.tokenizer
        self.sample_rate = checkpoint.features.sample_rate
        self.frame_seconds = checkpoint.frame_seconds
        self.samples_per_frame = round(self.frame_seconds * self.sample_rate)
        model = checkpoint.model
        self.decoder = LabelLoopingDecoder.from_model(model, device=self.device, dtype=parse_dtype(decoder_dtype))
        self.features = LogMelFeatures(checkpoint.features).to(self.device)
        self.encoder: EncoderBackend = create_encoder(
            encoder_backend, model, device=self.device, dtype=self.dtype, **encoder_options)
        self._state: DecoderState | None = None
        self._lock = threading.RLock()

    @classmethod
    def from_pretrained(
        cls,
        source: str | Path,
        device: str | torch.device = "cpu",
        dtype: str | torch.dtype = "float32",
        encoder_backend: str = "eager",
        **encoder_options: Any,
    ) -> ParakeetEngine:
        """Load a checkpoint folder, ``.nemo`` file or Hub id and build the engine on ``device``."""
        checkpoint = load_parakeet(source, device="cpu", dtype=torch.float32)
        return cls(checkpoint, device=device, dtype=dtype, encoder_backend=encoder_backend, **encoder_options)

    # ------------------------------------------------------------------ stages
    def encode(self, audio: torch.Tensor, lengths: torch.Tensor) -> EncoderOutput:
        """Padded audio ``[B, N]`` (16 kHz float) -> projected encoder frames and their lengths."""
        with self._lock, torch.inference_mode():
            feats, frames = self.features(audio.to(self.device), lengths.to(self.device))
            return self.encoder(feats, frames)

    def decode(
        self,
        encoded: EncoderOutput,
        carry: Sequence[DecoderCarry | None] | None = None,
        start_frames: Sequence[int] | torch.Tensor | None = None,
        end_frames: Sequence[int] | torch.Tensor | None = None,
    ) -> tuple[list[DecodedSeq], list[DecoderCarry]]:
        """Greedy TDT over frames ``start..end`` of each row (defaults: all valid frames), reusing one state."""
        with self._lock:
            b, t = encoded.enc_proj.shape[0], encoded.enc_proj.shape[1]
            state = self._state
            if state is None or state.batch_size < b or state.max_frames < t:
                grow_b = max(b, state.batch_size if state else 0)
                grow_t = max(t, state.max_frames if state else 0)
                state = self._state = self.decoder.alloc(grow_b, grow_t)
            lengths = encoded.lengths if end_frames is None else end_frames
            return self.decoder.decode(encoded.enc_proj, lengths, carry=carry, start_frames=start_frames, state=state)

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
