"""Offline GPU transcription: graphed front end (features + encoder) and graph decoder, pipelined.

The encoder of piece k+1 runs on one stream while the decoder loop of piece k runs on another; the
encoder only waits until the decoder has copied piece k's frames into its own state. Tokens are
copied to pinned host memory on the decoder stream, so the host never blocks between pieces, nor
between calls: ``submit`` enqueues a call, ``result`` waits for it (the window batcher submits the
next batch while the GPU decodes this one).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import numpy as np
import torch

from asr.parakeet.decoding.graph_decoder import GraphDecoder
from asr.parakeet.decoding.label_looping import DecodedSeq, DecoderState, LabelLoopingDecoder
from asr.parakeet.encoders.fast_conformer import FastConformer
from asr.parakeet.encoders.shape_profiles import HOP, ShapeProfile, plan_batches
from asr.parakeet.gpu.frontend_graphs import GraphedFrontEnd, ProfileGraph, host_encoder_lengths
from asr.parakeet.gpu.log_mel import LogMel


@dataclass
class _Tokens:
    """One piece's decoder output, copied to pinned host memory on the decoder stream."""

    lengths: torch.Tensor  # (b,)
    tokens: torch.Tensor  # (b, width)
    frames: torch.Tensor  # (b, width), relative to each row's start
    durations: torch.Tensor  # (b, width)

    @classmethod
    def copy_out(cls, state: DecoderState, batch: int, most: int) -> _Tokens:
        """Enqueue the copies on the current stream; ``most`` bounds the tokens a row can hold (its longest
        row's frames times the symbols per frame), so short windows do not copy a long state's buffers."""
        width = min(state.capacity, most)
        device = {
            "lengths": state.out_len[:batch].clamp(max=width),
            "tokens": state.out_tokens[:batch, :width],
            "frames": state.out_frames[:batch, :width] - state.start[:batch, None],
            "durations": state.out_durations[:batch, :width],
        }
        host = {}
        for name, tensor in device.items():
            host[name] = torch.empty(tensor.shape, dtype=torch.int32, pin_memory=True)
            host[name].copy_(tensor.to(torch.int32), non_blocking=True)
        return cls(**host)

    def sequences(self) -> list[DecodedSeq]:
        """Call after the copies are done."""
        lengths = self.lengths.tolist()
        tokens, frames, durations = self.tokens.numpy(), self.frames.numpy(), self.durations.numpy()
        return [DecodedSeq(tokens[i, :n].tolist(), frames[i, :n].tolist(), durations[i, :n].tolist())
                for i, n in enumerate(lengths)]


@dataclass
class Flight:
    """A submitted call: ``encoded`` fires when its last piece's encoder is done (the decoder is then the
    only work left on it), ``done`` when its tokens are on the host."""

    parts: list[_Tokens]
    encoded: torch.cuda.Event | None
    done: torch.cuda.Event | None

    def wait_encoded(self) -> None:
        if self.encoded is not None:
            self.encoded.synchronize()


@dataclass
class _Piece:
    profile: ShapeProfile
    audio: torch.Tensor
    sample_lengths: np.ndarray


class GpuTranscriber:
    """``transcribe(batches)`` -> per-clip token sequences, for a transformers ``ParakeetForTDT``."""

    def __init__(
        self,
        model: torch.nn.Module,
        profiles: list[ShapeProfile],
        device: torch.device | str = "cuda",
        dtype: torch.dtype = torch.bfloat16,
        compile_encoder: bool = True,
        use_graphs: bool = True,
        decoder_mode: str = "auto",
    ) -> None:
        self.device = torch.device(device)
        self.profiles = profiles
        n_mels = model.config.encoder_config.num_mel_bins
        self.logmel = LogMel(n_mels=n_mels).to(self.device)
        self.encoder = FastConformer(model.encoder, model.encoder_projector, dtype=dtype).to_device(
            self.device
        )
        if compile_encoder:
            self.encoder.compile_layers(dynamic=False)
        self.frontend = GraphedFrontEnd(self._front_end, profiles, self.device, use_graphs=use_graphs)
        self.label_looping = LabelLoopingDecoder.from_model(model, device=self.device, dtype=dtype)
        self.decoder_mode = decoder_mode
        self.decoders: dict[int, GraphDecoder] = {}  # one graph per profile batch size
        self.enc_stream = torch.cuda.Stream(self.device)
        # The decoder's small kernels go first when both streams have work (lower number = higher).
        self.dec_stream = torch.cuda.Stream(self.device, priority=-1)
        self._consumed: torch.cuda.Event | None = None  # the last piece's frames were copied out of its graph

    def _front_end(self, audio: torch.Tensor, sample_lengths: torch.Tensor) -> torch.Tensor:
        return self.encoder(*self.logmel(audio, sample_lengths))

    def decoder_for(self, profile: ShapeProfile) -> GraphDecoder:
        """The graph decoder sized for this profile's batch (small batches don't loop over big states)."""
        if profile.batch not in self.decoders:
            self.decoders[profile.batch] = GraphDecoder(self.label_looping, self.decoder_mode)
        decoder = self.decoders[profile.batch]
        frames, state = self.frontend.output_frames(profile), decoder.state
        if state is None or profile.batch > state.batch_size or frames > state.max_frames:
            torch.cuda.synchronize(self.device)  # growing frees the state a submitted call may still use
        decoder.ensure(profile.batch, frames)
        return decoder

    def warm_up(self, batch: int, seconds: float) -> None:
        """Build (compile + capture) the profile and the decoder graph a batch of this shape needs."""
        frames = int(seconds * 16000) // HOP + 1
        for profile, _, _ in plan_batches(self.profiles, batch, frames):
            self.frontend.build(profile)
            self.decoder_for(profile)

    def _pieces(self, batches: Iterable[tuple[torch.Tensor, np.ndarray]]) -> Iterator[_Piece]:
        for audio, sample_lengths in batches:
            frames = int(audio.shape[1]) // HOP + 1
            for profile, start, count in plan_batches(self.profiles, audio.shape[0], frames):
                yield _Piece(
                    profile, audio[start : start + count], np.asarray(sample_lengths[start : start + count])
                )

    def transcribe(self, batches: Iterable[tuple[torch.Tensor, np.ndarray]]) -> list[DecodedSeq]:
        """``batches``: (audio (b, n) float32, host or device; sample lengths (b,)). Results in input order."""
        return self.result(self.submit(batches))

    def submit(self, batches: Iterable[tuple[torch.Tensor, np.ndarray]]) -> Flight:
        """Enqueue ``batches`` on the GPU and return at once; :meth:`result` waits for their tokens.

        Per piece: the host stages it, its encoder runs on the encoder stream once the previous piece's
        decoder has copied out its frames, its decoder loads and loops on the decoder stream, and its tokens
        are copied to pinned host memory there. Nothing waits on the host, so piece k+1 encodes while piece
        k decodes, also across calls: a caller that submits the next batch before it asks for this one's
        result keeps both engines busy.
        """
        pieces = list(self._pieces(batches))
        if not pieces:
            return Flight([], None, None)
        graphs = [self.frontend.build(p.profile) for p in pieces]
        decoders = [self.decoder_for(p.profile) for p in pieces]
        parts: list[_Tokens] = []
        ready: torch.cuda.Event | None = None
        for graph, decoder, piece in zip(graphs, decoders, pieces, strict=True):
            self.frontend.stage(graph, piece.audio, piece.sample_lengths)  # waits only for its last copy-in
            encoded, ready = self._launch(graph, piece, self._consumed)
            lengths = host_encoder_lengths(piece.sample_lengths).tolist()
            with torch.cuda.stream(self.dec_stream):
                self.dec_stream.wait_event(ready)
                decoder.load(encoded, lengths)
                self._consumed = torch.cuda.Event()
                self._consumed.record(self.dec_stream)
                decoder.loop()
                assert decoder.state is not None
                # a row emits at most max_symbols_per_frame tokens a frame: copy no more columns than that
                parts.append(_Tokens.copy_out(decoder.state, int(piece.audio.shape[0]),
                                              max(lengths, default=0) * self.label_looping.max_symbols_per_frame))
        done = torch.cuda.Event()
        done.record(self.dec_stream)
        return Flight(parts, ready, done)

    def result(self, flight: Flight) -> list[DecodedSeq]:
        """The token sequences of a submitted call, in input order (blocks until its last piece is decoded)."""
        if flight.done is None:
            return []
        flight.done.synchronize()
        return [seq for part in flight.parts for seq in part.sequences()]

    def _launch(
        self, pg: ProfileGraph, piece: _Piece, consumed: torch.cuda.Event | None
    ) -> tuple[torch.Tensor, torch.cuda.Event]:
        with torch.cuda.stream(self.enc_stream):
            if consumed is not None:  # the previous output was copied out by the decoder
                self.enc_stream.wait_event(consumed)
            encoded = self.frontend.launch(pg, piece.audio)
            ready = torch.cuda.Event()
            ready.record(self.enc_stream)
        return encoded, ready
