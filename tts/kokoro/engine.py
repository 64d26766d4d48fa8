"""``KokoroEngine``: Kokoro-82M behind Cadence's TTS engine protocol, clause-streamed and batched.

    engine = KokoroEngine(KokoroOptions(checkpoint="/models/Kokoro-82M", voice="af_heart"))
    async for pcm in engine.synthesize_stream("Hello there, how can I help?"):  # 16-bit mono, 24 kHz
        ...
    for pcm in engine.synthesize("Hello there."):  # the sync protocol of tts.engines (any thread)
        ...
    engine.memory  # MemoryReport: weights and the measured CUDA peak of the warm-up batch

Each clause is one request to the process's :class:`SynthesisBatcher` (one per engine), so the first
clause's audio returns while later text is still queued, and the clauses of all concurrent callers
share GPU calls. A stream asks for its next clause when the previous one arrives, with the moment the
listener would run out of audio as its deadline (the batcher serves earliest deadline first), and
cancels what it has queued when it is closed or cancelled (barge-in, a caller who hangs up).
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch

from asr import compile_cache
from tts.kokoro import config as kconfig
from tts.kokoro.batcher import Request, SynthesisBatcher
from tts.kokoro.checkpoint import (
    CheckpointError,
    build_random,
    find_voice,
    load_checkpoint,
    load_voice,
    random_voice,
)
from tts.kokoro.g2p import make_g2p, to_ids
from tts.kokoro.model import KokoroModel, Utterance
from tts.kokoro.options import KokoroOptions
from tts.kokoro.text import clauses, split_ids

log = logging.getLogger(__name__)
_DTYPES = {"float32": torch.float32, "fp32": torch.float32, "bfloat16": torch.bfloat16, "bf16": torch.bfloat16,
           "float16": torch.float16, "fp16": torch.float16}


@dataclass
class MemoryReport:
    """What the GPU memory plan checks: weights plus the warm-up batch's measured peak."""

    device: str
    weights_bytes: int
    peak_bytes: int | None = None  # CUDA: max_memory_allocated during warm-up minus what was allocated before
    reserved_bytes: int | None = None  # CUDA: the caching allocator's reservation after warm-up
    warmup_batch: int = 0
    warmup_audio_s: float = 0.0
    warmup_s: float = 0.0  # wall time of the warm-up (torch.compile's graph builds included when compiled)

    @property
    def required_bytes(self) -> int:
        """Weights + warm-up peak: the share the engine needs (weights alone when not measured)."""
        return self.weights_bytes + (self.peak_bytes or 0)

    def as_dict(self) -> dict:
        return {**asdict(self), "required_bytes": self.required_bytes}


def resolve_device(name: str) -> torch.device:
    if name in ("", "auto"):
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def resolve_dtype(name: str, device: torch.device) -> torch.dtype:
    if name in ("", "auto"):
        return torch.float32
    try:
        dtype = _DTYPES[name.lower()]
    except KeyError:
        raise ValueError(f"unknown dtype {name!r} (float32, bfloat16, float16)") from None
    if device.type != "cuda" and dtype != torch.float32:
        log.warning("kokoro: %s decoder requested on %s; using float32", name, device)
        return torch.float32
    return dtype


class KokoroEngine:
    name = "kokoro"
    sample_rate = kconfig.SAMPLE_RATE

    def __init__(self, options: KokoroOptions | None = None, *, model: KokoroModel | None = None,
                 voice_pack: torch.Tensor | None = None):
        self.options = opts = options or KokoroOptions()
        self.device = resolve_device(opts.device)
        if self.device.type == "cuda" and opts.cudnn_benchmark:
            torch.backends.cudnn.benchmark = True
        source = Path(opts.checkpoint).expanduser() if opts.checkpoint else None
        if model is None:
            if source is not None:
                model = load_checkpoint(source)
            else:
                cfg = kconfig.tiny_config() if opts.tiny else kconfig.full_config()
                model = build_random(cfg, seed=opts.seed)
        self.random_weights = source is None
        if voice_pack is None:
            voice_path = find_voice(source, opts.voice)
            if voice_path is not None:
                voice_pack = load_voice(voice_path, model.config)
            elif source is not None:
                raise CheckpointError(f"no voice pack: give a voice .pt or put voices/*.pt beside {source}")
            else:
                voice_pack = random_voice(model.config, seed=opts.seed)
        self.voice_pack = voice_pack.float().reshape(-1, kconfig.style_width(model.config))
        self.decoder_dtype = resolve_dtype(opts.dtype, self.device)
        self.model = model.to(self.device)
        if self.decoder_dtype != torch.float32:
            self.model.set_decoder_dtype(self.decoder_dtype)
        if opts.compile:
            self.model.set_compiled(True, opts.compile_mode or None)
        self.g2p = make_g2p(opts.g2p, opts.language)
        # the first-clause lane's view of the weights (its own graphs, captured at warm-up), or None
        self.first_model = self.model.lane_view() if opts.first_lane else None
        self.batcher = SynthesisBatcher(self.model, opts.max_batch, opts.max_batch_phonemes, opts.frame_bucket,
                                        urgent_s=opts.urgent_s if opts.urgent_s >= 0 else None,
                                        first_model=self.first_model, first_max_batch=opts.first_lane_max_batch,
                                        first_max_ids=opts.first_lane_max_tokens - 2,
                                        work_ahead_phonemes=opts.work_ahead_phonemes)
        self.memory = MemoryReport(str(self.device), self.model.parameter_bytes())
        if opts.warmup:
            self.warmup()

    # ------------------------------------------------------------------ text -> utterances
    def phoneme_ids(self, text: str) -> list[int]:
        return to_ids(self.g2p.phonemes(text), self.model.vocab)

    def style_for(self, n_ids: int) -> torch.Tensor:
        """Kokoro's voice-pack row for an utterance of ``n_ids`` phonemes."""
        return self.voice_pack[min(max(n_ids - 1, 0), len(self.voice_pack) - 1)]

    def utterance(self, ids: list[int], speed: float | None = None, seed: int | None = None) -> Utterance:
        return Utterance(ids, self.style_for(len(ids)), float(speed or self.options.speed), seed)

    def utterances(self, text: str, speed: float | None = None, seed: int | None = None) -> Iterator[Utterance]:
        """The text's clauses as requests, phonemized lazily (one clause ahead of synthesis).

        ``seed`` fixes every clause's noise (reproducible audio, e.g. to compare engines); None: fresh noise.
        """
        o = self.options
        for clause in clauses(text, o.first_clause_words, o.max_clause_words, o.first_clause_max_words):
            ids = self.phoneme_ids(clause)
            for piece in split_ids(ids, self.model.max_phonemes, self.model.vocab.get(" ", 16)) if ids else []:
                yield self.utterance(piece, speed, seed)

    # ------------------------------------------------------------------ synthesis
    async def synthesize_stream(self, text: str, *, speed: float | None = None,
                                seed: int | None = None) -> AsyncIterator[bytes]:
        """16-bit mono PCM at :attr:`sample_rate`, one piece per clause, first clause first."""
        units = self.utterances(text, speed, seed)
        first = next(units, None)
        if first is None:
            return
        request: Request | None = self.batcher.enqueue(first, time.monotonic())
        runs_out: float | None = None  # when a listener would run out of audio delivered at ``pace``
        try:
            while request is not None:
                audio = await request.future
                now = time.monotonic()
                runs_out = max(runs_out or now, now) + len(audio) / self.sample_rate / self.options.pace
                following = next(units, None)
                request = self.batcher.enqueue(following, runs_out) if following is not None else None
                yield pcm16(audio)
        finally:
            if request is not None:
                request.cancel()

    def synthesize(self, text: str) -> Iterator[bytes]:
        """The blocking form (``tts.engines.TTSEngine``); call it from a worker thread, not the event loop."""
        units = self.utterances(text)
        first = next(units, None)
        if first is None:
            return
        request: Request | None = self.batcher.submit_future(first, time.monotonic())
        runs_out: float | None = None
        try:
            while request is not None:
                audio = request.future.result()
                now = time.monotonic()
                runs_out = max(runs_out or now, now) + len(audio) / self.sample_rate / self.options.pace
                following = next(units, None)
                request = self.batcher.submit_future(following, runs_out) if following is not None else None
                yield pcm16(audio)
        finally:
            if request is not None:
                request.cancel()

    # ------------------------------------------------------------------ warm-up and memory
    def warmup(self, batch: int | None = None, text: str | None = None) -> MemoryReport:
        """Run one batch of ``batch`` copies of ``text``'s longest clause (default: ``max_batch`` on CUDA, 1 else).

        On CUDA this records the peak memory of that batch above what was allocated before it; the
        GPU memory plan checks weights + peak against the TTS share.
        """
        cuda = self.device.type == "cuda"
        n = batch or (self.options.max_batch if cuda else 1)
        units = list(self.utterances(text or self.options.warmup_text)) or [self.utterance([16])]
        longest = max(units, key=lambda u: len(u.ids))
        t0 = time.perf_counter()
        if cuda:
            torch.cuda.synchronize(self.device)
            torch.cuda.reset_peak_memory_stats(self.device)
            before = torch.cuda.memory_allocated(self.device)
        self.batcher.submit_future(self.utterance(longest.ids, seed=0)).future.result()  # first-call setup
        if cuda and self.options.cuda_graphs and self.model.graphs is None:
            with self.batcher.held():  # the batcher thread stays off the model while graphs are captured
                self.model.enable_decoder_graphs(self.options.max_batch, max_frames=self.options.graph_max_frames,
                                                 max_cells=self.options.graph_max_cells, plan=self.options.graph_plan)
                if self.options.text_graphs:
                    self.model.enable_text_graphs(self.options.max_batch, max_tokens=self.options.graph_max_tokens,
                                                  max_cells=self.options.graph_max_token_cells,
                                                  plan=self.options.graph_plan)
                if self.first_model is not None:  # the first-clause lane's own, smaller buckets
                    self._capture_first_lane()
        with self.batcher.held():
            requests = [self.batcher.submit_future(self.utterance(longest.ids, seed=i)) for i in range(n)]
        audio_s = sum(len(r.future.result()) for r in requests) / self.sample_rate
        report = MemoryReport(str(self.device), self.model.parameter_bytes(), warmup_batch=n, warmup_audio_s=audio_s,
                              warmup_s=round(time.perf_counter() - t0, 2))
        if cuda:
            torch.cuda.synchronize(self.device)
            report.peak_bytes = int(torch.cuda.max_memory_allocated(self.device) - before)
            report.reserved_bytes = int(torch.cuda.memory_reserved(self.device))
        self.memory = report
        log.info("kokoro warm-up: %s", report.as_dict())
        if self.model.compiled:
            compile_cache.save("kokoro")
        return report

    def _capture_first_lane(self) -> None:
        o, lane = self.options, self.first_model
        assert lane is not None
        batch = o.first_lane_max_batch
        frames, tokens = o.first_lane_max_frames, o.first_lane_max_tokens
        lane.enable_decoder_graphs(batch, max_frames=frames, max_cells=batch * frames, plan=o.graph_plan)
        if o.text_graphs:
            lane.enable_text_graphs(batch, max_tokens=tokens, max_cells=batch * tokens, plan=o.graph_plan)

    def close(self) -> None:
        self.batcher.close()


def pcm16(audio: np.ndarray) -> bytes:
    """Float audio in [-1, 1] as little-endian 16-bit PCM."""
    return (np.clip(audio, -1.0, 1.0) * 32767.0).astype("<i2").tobytes()
