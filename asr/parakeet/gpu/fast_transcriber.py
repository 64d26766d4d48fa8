"""Offline GPU transcription: graphed front end (features + encoder) and graph decoder, pipelined.

The encoder of piece k+1 runs on one stream while the decoder loop of piece k runs on another; the
encoder only waits until the decoder has copied piece k's frames into its own state. The host
enqueues piece k+1 before it blocks on piece k's tokens, so the GPU never idles on the host.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import numpy as np
import torch

from asr.parakeet.decoding.graph_decoder import GraphDecoder
from asr.parakeet.decoding.label_looping import DecodedSeq, LabelLoopingDecoder
from asr.parakeet.encoders.fast_conformer import FastConformer
from asr.parakeet.encoders.shape_profiles import HOP, ShapeProfile, plan_batches
from asr.parakeet.gpu.frontend_graphs import GraphedFrontEnd, ProfileGraph, host_encoder_lengths
from asr.parakeet.gpu.log_mel import LogMel


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

    def _front_end(self, audio: torch.Tensor, sample_lengths: torch.Tensor) -> torch.Tensor:
        return self.encoder(*self.logmel(audio, sample_lengths))

    def decoder_for(self, profile: ShapeProfile) -> GraphDecoder:
        """The graph decoder sized for this profile's batch (small batches don't loop over big states)."""
        if profile.batch not in self.decoders:
            self.decoders[profile.batch] = GraphDecoder(self.label_looping, self.decoder_mode)
        decoder = self.decoders[profile.batch]
        decoder.ensure(profile.batch, self.frontend.output_frames(profile))
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
        """``batches``: (audio (b, n) float32, host or device; sample lengths (b,)). Results in input order.

        Per piece k: the host stages piece k+1 while the GPU encodes piece k; the decoder loads piece
        k (freeing the encoder output) and loops on its stream while piece k+1 encodes on the other.
        """
        pieces = list(self._pieces(batches))
        results: list[DecodedSeq] = []
        if not pieces:
            return results
        graphs = [self.frontend.build(p.profile) for p in pieces]
        decoders = [self.decoder_for(p.profile) for p in pieces]
        consumed = torch.cuda.Event()
        consumed.record(self.dec_stream)
        self.frontend.stage(graphs[0], pieces[0].audio, pieces[0].sample_lengths)
        encoded, ready = self._launch(graphs[0], pieces[0], consumed)
        pending: tuple[GraphDecoder, int, torch.cuda.Event] | None = None
        for k, piece in enumerate(pieces):
            has_next = k + 1 < len(pieces)
            if has_next:  # host copy of the next piece while the GPU encodes this one
                self.frontend.stage(graphs[k + 1], pieces[k + 1].audio, pieces[k + 1].sample_lengths)
            if pending is not None:
                results.extend(self._collect(*pending))
            decoder = decoders[k]
            with torch.cuda.stream(self.dec_stream):
                self.dec_stream.wait_event(ready)
                decoder.load(encoded, host_encoder_lengths(piece.sample_lengths).tolist())
                consumed = torch.cuda.Event()
                consumed.record(self.dec_stream)
                decoder.loop()
                done = torch.cuda.Event()
                done.record(self.dec_stream)
            pending = (decoder, int(piece.audio.shape[0]), done)
            if has_next:  # encode the next piece while this one decodes
                encoded, ready = self._launch(graphs[k + 1], pieces[k + 1], consumed)
        assert pending is not None
        results.extend(self._collect(*pending))
        return results

    def _launch(
        self, pg: ProfileGraph, piece: _Piece, consumed: torch.cuda.Event
    ) -> tuple[torch.Tensor, torch.cuda.Event]:
        with torch.cuda.stream(self.enc_stream):
            self.enc_stream.wait_event(consumed)  # the previous output was copied out by the decoder
            encoded = self.frontend.launch(pg, piece.audio)
            ready = torch.cuda.Event()
            ready.record(self.enc_stream)
        return encoded, ready

    def _collect(self, decoder: GraphDecoder, batch: int, done: torch.cuda.Event) -> list[DecodedSeq]:
        done.synchronize()
        assert decoder.state is not None
        with torch.cuda.stream(self.dec_stream):
            return self.label_looping.collect(decoder.state, batch)
