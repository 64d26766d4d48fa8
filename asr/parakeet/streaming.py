"""Stream sessions: one caller's utterance as a sequence of chunk decodes with carried decoder state.

Each tick re-encodes a window of audio (left context + the new chunks + optional right context)
and decodes only the frames of the new chunks, continuing from the session's decoder carry.
The window starts on an encoder-frame boundary, so window frame ``i`` is utterance frame
``window_start_frame + i`` exactly (16 kHz, hop 160, x8 subsampling: 1280 samples a frame).

Partials come at a cadence (``StreamConfig.partial_interval_ms``), not every chunk: a session is
due for a partial once its ready audio reaches ``next_partial_frame``; its window then decodes every
frame that arrived since the last one. Each session's partial grid is shifted by a whole number of
chunks derived from its id, so sessions that start together do not all come due on the same tick.
A consumer can ask for one partial now (``partial_requested``), whatever the cadence, or for a fresh one
(``fresh_requested``): a decode of the whole utterance so far, as the final pass makes (the caller paused: the
text a speculative reply starts on should be the one the final will read), after which streaming goes on from it.

At the end of speech the session asks for a final decode. When the whole utterance fits in the
left context (and ``final_pass`` is on) the final is a fresh decode of the whole utterance, which
is exactly what offline decoding gives; otherwise the remaining frames are decoded from the
carry like any other chunk.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # torch's types only: a session process that streams through the engine process never imports torch
    from asr.parakeet.decoding.label_looping import DecodedSeq, DecoderCarry

_ids = itertools.count(1)


@dataclass(frozen=True)
class StreamConfig:
    sample_rate: int = 16000
    chunk_ms: int = 160
    left_context_s: float = 10.0
    right_context_ms: int = 0
    samples_per_frame: int = 1280  # encoder frame: hop 160 x subsampling 8
    final_pass: bool = True
    # A partial result every this many ms of audio (rounded up to whole chunks); 0: every chunk.
    partial_interval_ms: int = 640

    def frames(self, ms: float) -> int:
        """Whole encoder frames in ``ms`` (rounded up, at least 0)."""
        per_frame_ms = 1000.0 * self.samples_per_frame / self.sample_rate
        return max(0, -(-round(ms * 1000) // round(per_frame_ms * 1000)))

    @property
    def chunk_frames(self) -> int:
        return max(1, self.frames(self.chunk_ms))

    @property
    def left_frames(self) -> int:
        return self.frames(self.left_context_s * 1000.0)

    @property
    def right_samples(self) -> int:
        return self.frames(self.right_context_ms) * self.samples_per_frame

    @property
    def partial_frames(self) -> int:
        """Encoder frames between partials: ``partial_interval_ms`` in whole chunks (0: one chunk)."""
        c = self.chunk_frames
        return max(c, -(-self.frames(self.partial_interval_ms) // c) * c)

    @property
    def window_samples(self) -> int:
        """Samples of a caught-up session's window: left context + one chunk + right context."""
        return (self.left_frames + self.chunk_frames) * self.samples_per_frame + self.right_samples

    @property
    def max_window_samples(self) -> int:
        """Samples of a window at the partial cadence: left context + one partial interval + one chunk
        of slack (the chunk that can arrive while a due session waits for its tick) + right context.
        The encoder profiles are sized to this."""
        frames = self.left_frames + self.partial_frames + self.chunk_frames
        return frames * self.samples_per_frame + self.right_samples


@dataclass
class WindowRequest:
    """One session's share of a tick: audio to encode and which of its frames to decode."""

    session: StreamSession
    audio: np.ndarray  # window samples
    window_start_frame: int  # utterance frame of the window's first encoder frame
    start_frame: int  # first utterance frame to decode
    end_frame: int | None  # one past the last utterance frame to decode; None: every frame of the window
    carry: DecoderCarry | None
    final: bool
    fresh: bool  # a from-scratch decode that replaces the committed tokens


@dataclass
class StreamResult:
    """A partial or final result: the utterance's tokens so far, with utterance frame indices."""

    session_id: int
    final: bool
    text: str
    tokens: list[int]
    frames: list[int]
    durations: list[int]
    audio_s: float  # utterance audio consumed when this result was made
    fresh: bool = False  # a decode of the whole utterance from the start state (what the final pass gives)


@dataclass
class StreamSession:
    """Audio, decoding position and committed tokens of one utterance."""

    config: StreamConfig
    id: int = field(default_factory=lambda: next(_ids))
    # live audio = _buf[_head : _head + total_samples - base_sample]; appends write past it, trims move
    # _head, a full buffer is replaced: bytes a window view (``audio``) covers are never written again
    _buf: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.float32), repr=False)
    _head: int = 0
    base_sample: int = 0  # utterance sample of audio[0] (old audio is trimmed away)
    total_samples: int = 0
    decoded_frames: int = 0  # utterance frames already decoded
    carry: DecoderCarry | None = None
    tokens: list[int] = field(default_factory=list)
    frames: list[int] = field(default_factory=list)
    durations: list[int] = field(default_factory=list)
    in_flight: bool = False
    next_partial_frame: int = 0  # a partial is due once ready_end_frame() reaches this
    partial_requested: bool = False  # a consumer asked for a partial now (cleared when one is made)
    fresh_requested: bool = False  # ... decoded afresh over the whole utterance so far, as the final pass does

    def __post_init__(self) -> None:
        self._arm_partials()

    @property
    def partial_offset(self) -> int:
        """Frames this session's partial grid is shifted by: a whole number of chunks, from the id."""
        c = self.config
        slots = c.partial_frames // c.chunk_frames
        return (self.id % slots) * c.chunk_frames if slots > 1 else 0

    def _arm_partials(self) -> None:
        """First partial after 1 .. partial_frames / chunk_frames chunks (staggered by id)."""
        self.next_partial_frame = self.config.partial_frames - self.partial_offset
        self.partial_requested = self.fresh_requested = False

    def _advance_partials(self) -> None:
        """The next grid point past the decoded frames."""
        p = self.config.partial_frames
        first = p - self.partial_offset
        done = self.decoded_frames
        self.next_partial_frame = first if done < first else first + (done - first) // p * p + p

    def partial_due(self) -> bool:
        """Whether a partial is owed: new whole chunks, and the cadence (or a consumer) asks for one."""
        if self.fresh_requested and self._fits_final_pass():
            return True
        end = self.ready_end_frame()
        return end > self.decoded_frames and (end >= self.next_partial_frame or self.partial_requested)

    def _fits_final_pass(self) -> bool:
        """The whole utterance is still kept and fits one window: a fresh decode of it is possible."""
        c = self.config
        return c.final_pass and self.base_sample == 0 and self.total_samples <= (c.left_frames + c.chunk_frames) * \
            c.samples_per_frame

    @property
    def audio(self) -> np.ndarray:
        """The kept audio (a view; from utterance sample ``base_sample``)."""
        return self._buf[self._head : self._head + self.total_samples - self.base_sample]

    def push(self, samples: np.ndarray) -> None:
        """Append audio: amortized O(len(samples)), where a concatenation copied the whole kept window
        (up to 10 s) on the event loop for every 20 ms frame."""
        samples = np.asarray(samples, dtype=np.float32).reshape(-1)
        n, live = len(samples), self.total_samples - self.base_sample
        end = self._head + live
        if end + n > len(self._buf):  # a new buffer: views of the old one stay valid for the worker
            grown = np.empty(max(3 * (live + n) // 2, 16000), dtype=np.float32)  # 1.5x: amortized O(n)
            grown[:live] = self._buf[self._head : end]
            self._buf, self._head, end = grown, 0, live
        self._buf[end : end + n] = samples
        self.total_samples += n

    def reset(self) -> None:
        """Start a new utterance (same session id)."""
        self._buf, self._head = np.zeros(0, dtype=np.float32), 0
        self.base_sample = self.total_samples = self.decoded_frames = 0
        self.carry = None
        self.tokens, self.frames, self.durations = [], [], []
        self._arm_partials()

    def ready_end_frame(self) -> int:
        """The frame up to which whole chunks (with their right context) are available."""
        c = self.config
        usable = max(0, self.total_samples - c.right_samples) // c.samples_per_frame
        return usable // c.chunk_frames * c.chunk_frames

    def has_chunk(self) -> bool:
        return self.ready_end_frame() > self.decoded_frames

    def next_request(self, final: bool = False) -> WindowRequest | None:
        """The window for the next tick, or None when there is nothing new to decode."""
        c = self.config
        spf = c.samples_per_frame
        if final or (self.fresh_requested and self._fits_final_pass()):
            if self._fits_final_pass():  # every frame so far, from the start state
                return WindowRequest(self, self.audio, 0, 0, None, None, final=final, fresh=True)
            end_frame: int | None = None  # every remaining frame of the audio
            end_sample = self.total_samples
            window_end_frame = -(-self.total_samples // spf)
        else:
            end = self.ready_end_frame()
            if end <= self.decoded_frames:
                return None
            end_frame = end
            end_sample = min(self.total_samples, end * spf + c.right_samples)
            window_end_frame = end
        start_frame = max(0, min(self.decoded_frames, window_end_frame) - c.left_frames)
        start_frame = max(start_frame, -(-self.base_sample // spf))
        lo = start_frame * spf - self.base_sample
        # a view: push() writes only past it (or into a new buffer), _trim() only moves the head
        audio = self.audio[lo : end_sample - self.base_sample]
        return WindowRequest(self, audio, start_frame, self.decoded_frames, end_frame, self.carry,
                             final=final, fresh=False)

    def apply(self, request: WindowRequest, seq: DecodedSeq, carry: DecoderCarry, end_frame: int) -> StreamResult:
        """Commit a decoded window; ``seq.frames`` count from ``request.start_frame``."""
        frames = [request.start_frame + f for f in seq.frames]
        if request.fresh:
            self.tokens, self.frames, self.durations = list(seq.tokens), frames, list(seq.durations)
        else:
            self.tokens += seq.tokens
            self.frames += frames
            self.durations += seq.durations
        self.carry = carry
        self.decoded_frames = max(self.decoded_frames, end_frame)
        if not request.final:
            self.partial_requested = False
            # a fresh partial asked while a chunk window was in flight is still owed (unless none is possible now)
            if request.fresh or not self._fits_final_pass():
                self.fresh_requested = False
            self._advance_partials()
        self._trim()
        return StreamResult(self.id, request.final, "", list(self.tokens), list(self.frames),
                            list(self.durations), self.total_samples / self.config.sample_rate, fresh=request.fresh)

    def _trim(self) -> None:
        """Drop audio no future window needs (only once the utterance outgrew the left context)."""
        c = self.config
        spf = c.samples_per_frame
        if self.total_samples <= (c.left_frames + c.chunk_frames) * spf:
            return  # keep everything: the final pass may re-decode the whole utterance
        keep_from = max(0, self.decoded_frames - c.left_frames) * spf
        if keep_from > self.base_sample:
            self._head += keep_from - self.base_sample
            self.base_sample = keep_from
