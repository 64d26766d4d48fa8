"""TTS engines behind one small interface: text in, 16-bit mono PCM pieces out.

``synthesize`` yields audio as soon as the engine has it (Piper yields per sentence), so
the service can start playback before the whole text is rendered. Batched GPU engines
(``tts.kokoro``) also offer ``async synthesize_stream(text)``, which the service prefers.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
import wave
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Protocol

from tts.options import TTSConfig


class TTSEngineError(RuntimeError):
    """The TTS engine is missing or failed."""


class TTSEngine(Protocol):
    name: str
    sample_rate: int

    def synthesize(self, text: str) -> Iterator[bytes]: ...


class PiperEngine:
    """Piper (ONNX VITS) through its Python API; GPL-3.0, so an optional extra.

    Its ONNX session does not spin-wait between operators (``spin=False``): a reply's first sentence
    is synthesized while llama.cpp generates the rest on the same cores, and spinning workers of
    both slowed Piper ~3x (85 -> 270 ms a sentence on 2 cores; ~175 ms without spinning).
    """

    name = "piper"

    def __init__(self, voice_path: Path, speed: float = 1.0, threads: int = 0, spin: bool = False):
        try:
            import onnxruntime
            from piper import PiperVoice, SynthesisConfig
            from piper.config import PiperConfig
        except ImportError as exc:
            raise TTSEngineError("piper-tts is not installed: pip install 'cadence[embedded]'") from exc
        if not voice_path.is_file():
            raise TTSEngineError(f"Piper voice not found: {voice_path}")
        if threads < 0:
            raise TTSEngineError(f"Piper threads must be >= 0 (0: onnxruntime's choice), got {threads}")
        config_path = Path(f"{voice_path}.json")
        if not config_path.is_file():
            raise TTSEngineError(f"Piper voice config not found: {config_path}")
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = threads
        options.add_session_config_entry("session.intra_op.allow_spinning", "1" if spin else "0")
        session = onnxruntime.InferenceSession(str(voice_path), sess_options=options,
                                               providers=["CPUExecutionProvider"])
        config = PiperConfig.from_dict(json.loads(config_path.read_text(encoding="utf-8")))
        self._voice = PiperVoice(session=session, config=config)
        self._syn_config = SynthesisConfig(length_scale=1.0 / max(speed, 0.1))
        self.sample_rate = int(self._voice.config.sample_rate)

    def synthesize(self, text: str) -> Iterator[bytes]:
        for chunk in self._voice.synthesize(text, syn_config=self._syn_config):
            yield chunk.audio_int16_bytes


class FliteEngine:
    """Debian's flite command line: tiny, fast, robotic; the fallback when Piper is absent."""

    name = "flite"

    def __init__(self, voice: str = "slt"):
        self._binary = shutil.which("flite")
        if self._binary is None:
            raise TTSEngineError("flite is not installed (Debian package 'flite')")
        self._voice = voice or "slt"
        self.sample_rate = 8000 if self._voice == "kal" else 16000

    def synthesize(self, text: str) -> Iterator[bytes]:
        with tempfile.NamedTemporaryFile(suffix=".wav") as out:
            proc = subprocess.run(
                [self._binary, "-voice", self._voice, "-t", text, "-o", out.name],
                capture_output=True,
                timeout=30,
                check=False,
            )
            if proc.returncode != 0:
                raise TTSEngineError(f"flite failed ({proc.returncode}): {proc.stderr.decode(errors='replace')[:200]}")
            with wave.open(out.name) as wav:
                self.sample_rate = wav.getframerate()
                pcm = wav.readframes(wav.getnframes())
        yield pcm


def create_engine(config: TTSConfig, default_voice: Callable[[], Path] | None = None) -> TTSEngine:
    """Pick the engine named in config; ``auto`` means Piper if installed, else flite.

    ``default_voice`` locates the Piper voice when ``tts.voice`` is empty (the runtime passes
    its embedded-voice locator; a missing voice raises ``FileNotFoundError``).
    """
    if config.engine == "kokoro":  # the batched GPU engine; options from ``config.kokoro`` when present
        from tts.kokoro.options import KokoroOptions

        options = getattr(config, "kokoro", None) or KokoroOptions(
            voice=config.voice, speed=config.speed, dtype=config.kokoro_dtype, compile=config.kokoro_compile,
            max_batch=config.kokoro_max_batch, cuda_graphs=config.kokoro_cuda_graphs,
            text_graphs=config.kokoro_text_graphs, graph_plan=config.kokoro_graph_plan,
            first_lane=config.kokoro_first_lane, work_ahead_phonemes=config.kokoro_work_ahead_phonemes,
            first_clause_max_words=config.first_clause_max_words)
        try:
            from tts.kokoro.engine import KokoroEngine
        except ImportError as exc:
            raise TTSEngineError(f"the kokoro engine needs torch: pip install 'cadence[gputts]' ({exc})") from exc
        return KokoroEngine(options)
    if config.engine in ("auto", "piper"):
        try:
            if not config.voice and default_voice is None:
                raise TTSEngineError("no Piper voice: set tts.voice")
            voice = Path(config.voice) if config.voice else default_voice()
            return PiperEngine(voice, config.speed)
        except (TTSEngineError, FileNotFoundError):
            if config.engine == "piper":
                raise
    if config.engine in ("auto", "flite"):
        return FliteEngine(config.voice if config.engine == "flite" else "slt")
    raise TTSEngineError(f"unknown tts.engine {config.engine!r} (auto, piper, flite, kokoro)")
