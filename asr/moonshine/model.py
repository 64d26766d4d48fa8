"""Moonshine (encoder + merged KV-cache decoder) on plain ONNX Runtime: load a model folder, decode greedily.

A model folder holds ``encoder_model`` and ``decoder_model_merged`` (``.ort`` or ``.onnx``) and
``tokenizer.bin`` or ``tokenizer.json``; moonshine-voice 0.1.0 ships tiny-en that way (the runtime,
``agent.models``, finds it). The layer count and cache shapes are read from the decoder's inputs, so
tiny and base folders load alike. Moonshine encodes exactly the audio it is given (no padded 30 s
window), so its cost grows with the utterance.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from asr.moonshine.tokenizer import MoonshineTokenizer, TokenizerError

SAMPLE_RATE = 16000
EXTRA_HINT = "pip install 'cadence[moonshine]'"
START_TOKEN, EOS_TOKEN = 1, 2
# Moonshine's own bound on a transcript (its Hugging Face usage notes): ~6.5 tokens per second of
# audio; a looping decode stops there. The few extra tokens let a sub-second "Thank you." finish.
TOKENS_PER_SECOND = 6.5
EXTRA_TOKENS = 6
MIN_SECONDS = 0.1  # shorter input has no frame to attend to: nothing is said
# Moonshine has no no-speech token: on silence, noise or a tone followed by silence it writes a bare
# "You" (no stop), which none of 269 recorded Asterisk prompts got (a beep did). Such a window is
# taken for no speech, as Whisper's no_speech_prob drops its own; a spoken "You." keeps its stop.
NO_SPEECH_TEXTS = frozenset({"You"})
MAX_WINDOW_S = 30.0  # longer audio is transcribed in windows cut at quiet points (split_windows)


class MoonshineModelError(ValueError):
    """A model folder or file that cannot be used as Moonshine."""


def _onnxruntime() -> Any:
    try:
        import onnxruntime
    except ImportError as exc:
        raise ImportError(f"the Moonshine ASR engine needs onnxruntime: {EXTRA_HINT}") from exc
    return onnxruntime


def max_tokens(seconds: float) -> int:
    """The most tokens a transcript of ``seconds`` of audio may have."""
    return int(seconds * TOKENS_PER_SECOND) + EXTRA_TOKENS


def _model_file(folder: Path, stem: str) -> Path:
    for suffix in (".ort", ".onnx"):
        if (folder / f"{stem}{suffix}").is_file():
            return folder / f"{stem}{suffix}"
    raise FileNotFoundError(f"no {stem}.ort or {stem}.onnx in {folder}: a Moonshine model folder holds "
                            "encoder_model, decoder_model_merged and tokenizer.bin (or tokenizer.json)")


def _session(ort: Any, path: Path, threads: int) -> Any:
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    # Idle pool threads must not spin: this box's few cores also run the LLM and the TTS.
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    try:
        return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    except Exception as exc:  # onnxruntime raises its own Fail / InvalidProtobuf / InvalidGraph types
        raise MoonshineModelError(f"cannot load Moonshine model file {path}: {exc}") from exc


@dataclass(frozen=True)
class Decoded:
    """One window's greedy decode: the token ids (no start or end token) and how sure each step was."""

    tokens: list[int]
    min_prob: float = 1.0  # the lowest softmax probability of a chosen token, the end token included
    stopped: bool = True  # the end token came before the length bound (a looping decode did not stop)


@dataclass(frozen=True)
class Transcript:
    """Text of a whole clip and the least sure step of any of its windows."""

    text: str
    min_prob: float
    stopped: bool


@dataclass(frozen=True)
class _Cache:
    """The decoder's KV-cache inputs, and which of its outputs feeds each."""

    inputs: tuple[str, ...]  # past_key_values.{layer}.{decoder|encoder}.{key|value}
    outputs: tuple[str, ...]  # present.{...}, same order
    heads: int
    head_dim: int


def _cache_layout(decoder: Any, path: Path) -> _Cache:
    ins = {i.name: i for i in decoder.get_inputs()}
    outs = {o.name for o in decoder.get_outputs()}
    past = sorted(n for n in ins if n.startswith("past_key_values."))
    needed = {"input_ids", "encoder_hidden_states", "use_cache_branch"}
    if not past or not needed <= set(ins) or "logits" not in outs:
        raise MoonshineModelError(f"{path} is not a merged Moonshine decoder (inputs: {sorted(ins)})")
    present = [n.replace("past_key_values.", "present.", 1) for n in past]
    missing = [n for n in present if n not in outs]
    if missing:
        raise MoonshineModelError(f"{path}: no decoder output {missing[0]} for {past[0]}")
    shape = ins[past[0]].shape  # [batch, heads, sequence, head_dim]
    if len(shape) != 4 or not isinstance(shape[1], int) or not isinstance(shape[3], int):
        raise MoonshineModelError(f"{path}: unexpected cache shape {shape}")
    return _Cache(tuple(past), tuple(present), shape[1], shape[3])


class MoonshineModel:
    """One loaded Moonshine model; ``transcribe`` may be called from several threads at once."""

    def __init__(self, folder: str | Path, cpu_threads: int = 2):
        ort = _onnxruntime()
        self.folder = Path(folder)
        if not self.folder.is_dir():
            raise FileNotFoundError(f"Moonshine model folder {self.folder} does not exist")
        encoder_path, decoder_path = _model_file(self.folder, "encoder_model"), _model_file(self.folder,
                                                                                          "decoder_model_merged")
        vocab = next((self.folder / n for n in ("tokenizer.bin", "tokenizer.json") if (self.folder / n).is_file()),
                     None)
        if vocab is None:
            raise FileNotFoundError(f"no tokenizer.bin or tokenizer.json in {self.folder}")
        try:
            self.tokenizer = MoonshineTokenizer.load(vocab)
        except TokenizerError as exc:
            raise MoonshineModelError(str(exc)) from exc
        self.encoder = _session(ort, encoder_path, cpu_threads)
        self.decoder = _session(ort, decoder_path, cpu_threads)
        self._cache = _cache_layout(self.decoder, decoder_path)
        self._encoder_mask = "attention_mask" in {i.name for i in self.encoder.get_inputs()}
        self._decoder_mask = "encoder_attention_mask" in {i.name for i in self.decoder.get_inputs()}

    def transcribe(self, samples: np.ndarray, sample_rate: int = SAMPLE_RATE, max_window_s: float = MAX_WINDOW_S) -> str:
        """Mono float audio in [-1, 1] at 16 kHz to text; longer than ``max_window_s``: window by window."""
        return self.transcribe_scored(samples, sample_rate, max_window_s).text

    def transcribe_scored(self, samples: np.ndarray, sample_rate: int = SAMPLE_RATE,
                          max_window_s: float = MAX_WINDOW_S) -> Transcript:
        """``transcribe`` with the decode's confidence (``asr.fallback`` asks Whisper when it is low)."""
        if sample_rate != SAMPLE_RATE:
            raise ValueError(f"Moonshine takes {SAMPLE_RATE} Hz audio, got {sample_rate} Hz: resample it first")
        samples = np.asarray(samples, dtype=np.float32).reshape(-1)
        texts, min_prob, stopped = [], 1.0, True
        for window in split_windows(samples, int(max_window_s * SAMPLE_RATE)):
            decoded = self.generate(window, max_tokens(len(window) / SAMPLE_RATE))
            text = self.tokenizer.decode(decoded.tokens).strip()
            if text and text not in NO_SPEECH_TEXTS:
                texts.append(text)
                min_prob, stopped = min(min_prob, decoded.min_prob), stopped and decoded.stopped
        return Transcript(" ".join(texts), min_prob, stopped)

    def generate(self, samples: np.ndarray, limit: int) -> Decoded:
        """Greedy decode of one window."""
        if len(samples) < MIN_SECONDS * SAMPLE_RATE:
            return Decoded([])
        audio = np.ascontiguousarray(samples, dtype=np.float32)[None, :]
        mask = np.ones_like(audio, dtype=np.int64)
        feeds = {"input_values": audio, **({"attention_mask": mask} if self._encoder_mask else {})}
        hidden = self.encoder.run(None, feeds)[0]
        c = self._cache
        empty = np.zeros((0, c.heads, 1, c.head_dim), dtype=np.float32)
        past = dict.fromkeys(c.inputs, empty)
        fixed = {"encoder_hidden_states": hidden, **({"encoder_attention_mask": mask} if self._decoder_mask else {})}
        tokens: list[int] = []
        token, min_prob = START_TOKEN, 1.0
        for step in range(limit):
            out = self.decoder.run(["logits", *c.outputs], {
                "input_ids": np.array([[token]], dtype=np.int64),
                "use_cache_branch": np.array([step > 0]), **fixed, **past})
            logits = out[0][0, -1]
            token = int(logits.argmax())
            min_prob = min(min_prob, 1.0 / float(np.exp(logits - logits[token]).sum()))  # softmax of the argmax
            if token == EOS_TOKEN:
                return Decoded(tokens, min_prob, True)
            tokens.append(token)
            # The encoder's cross-attention cache is computed once (first step); the decoder's grows each step.
            past = {name: value if step == 0 or ".decoder." in name else past[name]
                    for name, value in zip(c.inputs, out[1:], strict=True)}
        return Decoded(tokens, min_prob, False)


def split_windows(samples: np.ndarray, window: int, search: int | None = None) -> list[np.ndarray]:
    """Cut audio longer than ``window`` samples at its quietest 20 ms in the last ``search`` samples of each window."""
    search = window // 3 if search is None else search
    frame = 320
    out, start = [], 0
    while len(samples) - start > window:
        lo, hi = start + window - search, start + window
        energy = [float(np.mean(samples[i:i + frame] ** 2)) for i in range(lo, hi - frame + 1, frame)]
        cut = lo + frame * int(np.argmin(energy)) + frame // 2 if energy else hi
        out.append(samples[start:cut])
        start = cut
    out.append(samples[start:])
    return out


_MODELS: dict[tuple[str, int], MoonshineModel] = {}
_LOCK = threading.Lock()


def shared_moonshine_model(folder: str, cpu_threads: int = 2) -> MoonshineModel:
    """One model per (folder, CPU threads) for the whole process."""
    key = (str(Path(folder).resolve()), cpu_threads)
    with _LOCK:
        if key not in _MODELS:
            _MODELS[key] = MoonshineModel(folder, cpu_threads)
        return _MODELS[key]
